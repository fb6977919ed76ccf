package rediscore

// Keys returns the Redis keys of key under the default prefix, in the order the scripts take
// them: for the external tests, which look at what the scripts stored.
func Keys(key string) []string { return layout{prefix: defaultPrefix}.keys(key) }

// Channel returns the channel of key under the default prefix for the Store with id store ("*"
// makes a pattern that matches every Store's).
func Channel(key, store string) string { return layout{prefix: defaultPrefix}.channel(key, store) }
