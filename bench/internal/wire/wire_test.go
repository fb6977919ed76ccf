package wire

import (
	"maps"
	"testing"
)

func TestParserAcrossWrites(t *testing.T) {
	stream := "*2\r\n$5\r\nhello\r\n$1\r\n3\r\n" +
		"*5\r\n$7\r\nEVALSHA\r\n$40\r\n0123456789012345678901234567890123456789\r\n$1\r\n1\r\n$1\r\nk\r\n$0\r\n\r\n" +
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\nab\r\ncd\r\n*$xy\r\n" +
		"PING\r\n" +
		"*1\r\n$4\r\nping\r\n"
	want := Counts{"HELLO": 1, "EVALSHA": 1, "SET": 1, "PING": 2}
	for size := 1; size <= len(stream); size++ {
		c := NewCounter()
		p := parser{count: c.add}
		for i := 0; i < len(stream); i += size {
			p.feed([]byte(stream[i:min(i+size, len(stream))]))
		}
		if got := c.Snapshot(); !maps.Equal(got, want) {
			t.Fatalf("writes of %d bytes: got %v, want %v", size, got, want)
		}
	}
}

func TestSinceLeavesOutHandshake(t *testing.T) {
	before := Counts{"EVALSHA": 2, "HELLO": 1}
	after := Counts{"EVALSHA": 5, "HELLO": 3, "CLIENT": 2, "SET": 1}
	got := after.Since(before)
	if want := (Counts{"EVALSHA": 3, "SET": 1}); !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got.Total() != 4 {
		t.Fatalf("total %d, want 4", got.Total())
	}
}

func TestStatementName(t *testing.T) {
	for sql, want := range map[string]string{
		`SELECT granted, fence FROM "public"."leasehold_acquire"($1::bytea, $2)`: "leasehold_acquire",
		"SELECT pg_advisory_lock($1)":                                            "pg_advisory_lock",
		"\n\t\tINSERT INTO locks (name) VALUES ($1)":                             "INSERT",
		"begin":    "BEGIN",
		"-- ping":  "PING",
		"SELECT 1": "SELECT",
	} {
		if got := statementName(sql); got != want {
			t.Errorf("statementName(%q) = %q, want %q", sql, got, want)
		}
	}
}
