package hidden

func Hidden() {}
