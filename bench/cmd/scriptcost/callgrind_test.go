package main

import "testing"

func TestTotalInstructionsReadsTheFirstCountOfTheSummary(t *testing.T) {
	dump := "# callgrind format\nversion: 1\ncmd: redis-server\npid: 42\n\npositions: line\nevents: Ir\nsummary: 12345678\n\nfl=(1) server.c\nfn=(1) main\n3 10\n\ntotals: 12345678\n"
	n, err := totalInstructions(dump)
	if err != nil || n != 12345678 {
		t.Fatalf("totalInstructions = %d, %v; want 12345678", n, err)
	}
}

func TestTotalInstructionsTakesIrWhenMoreEventsAreCounted(t *testing.T) {
	n, err := totalInstructions("events: Ir Dr Dw\ntotals: 900 300 200\n")
	if err != nil || n != 900 {
		t.Fatalf("totalInstructions = %d, %v; want 900", n, err)
	}
}

func TestTotalInstructionsRefusesADumpWithoutItsCount(t *testing.T) {
	for name, dump := range map[string]string{
		"empty":             "",
		"cut before totals": "version: 1\nevents: Ir\nfn=(1) main\n3 10\n",
		"no count":          "events: Ir\ntotals:\n",
		"Ir not first":      "events: Dr Ir\ntotals: 1 2\n",
	} {
		if n, err := totalInstructions(dump); err == nil {
			t.Errorf("%s: totalInstructions = %d, nil; want an error", name, n)
		}
	}
}
