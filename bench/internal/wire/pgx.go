package wire

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Tracer returns a pgx.QueryTracer that counts, in c, each statement a pgx connection sends:
// one round trip each once the statement is prepared. A statement is named by its first word,
// upper-case, or, for a SELECT of a function, by the function's name ("leasehold_acquire",
// "nextval"); pgx's Ping ("-- ping") is counted as PING, which Since leaves out, as it does
// Redis's. A nil c counts nothing.
func Tracer(c *Counter) pgx.QueryTracer { return tracer{c} }

type tracer struct{ c *Counter }

func (t tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if t.c != nil {
		t.c.add(statementName(data.SQL))
	}
	return ctx
}

func (tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// statementName names sql as Tracer counts it.
func statementName(sql string) string {
	sql = strings.TrimSpace(sql)
	if strings.HasPrefix(sql, "-- ping") {
		return "PING"
	}
	words := strings.Fields(sql)
	if len(words) == 0 {
		return ""
	}
	first := strings.ToUpper(words[0])
	if first != "SELECT" {
		return first
	}
	call, _, ok := strings.Cut(sql, "(")
	if !ok {
		return first
	}
	fields := strings.Fields(call)
	name := fields[len(fields)-1]
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.Trim(name, `"`)
}
