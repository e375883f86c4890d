// Package callcount counts what a request costs on the wire: each AWS SDK
// call by service and operation (a middleware), and each PostgreSQL
// statement and commit (a pgx tracer). `make bench` uses it to count the
// durable writes and round trips of a payment; the counts are exact, not
// timed, so they hold on any machine.
package callcount

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"github.com/jackc/pgx/v5"
)

// Counter holds the counts since the last Reset. Safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	calls  map[string]int // "DynamoDB.PutItem", "SQL.INSERT", "SQL.COMMIT", ...
	writes int
	inTx   map[*pgx.Conn]bool
}

// New returns an empty Counter.
func New() *Counter { return &Counter{calls: map[string]int{}, inTx: map[*pgx.Conn]bool{}} }

// awsWrites are the operations that change durable state.
var awsWrites = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true,
	"SendMessage": true, "SendMessageBatch": true, "Publish": true, "PublishBatch": true,
}

// AWS is an SDK APIOptions entry: append it to a client's APIOptions and
// every call of that client is counted once, by its outcome (retries of one
// call are one call: the count is taken at Initialize, outside the retry
// loop).
func (c *Counter) AWS(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("callcount", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		svc, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
		out, md, err := next.HandleInitialize(ctx, in)
		key := svc + "." + op
		if err != nil {
			// A failed call (a conditional put that finds the key held) is
			// a round trip, and DynamoDB bills it as a write, but it
			// changes nothing: it is not a durable write.
			key += "!failed"
		}
		c.mu.Lock()
		c.calls[key]++
		if awsWrites[op] && err == nil {
			c.writes++
		}
		c.mu.Unlock()
		return out, md, err
	}), middleware.Before)
}

// TraceQueryStart counts a statement. A COMMIT is a durable write; so is a
// data-changing statement outside a transaction (autocommit). BEGIN and
// ROLLBACK are round trips, not writes.
func (c *Counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	verb := strings.ToUpper(firstWord(data.SQL))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["SQL."+verb]++
	switch verb {
	case "BEGIN":
		c.inTx[conn] = true
	case "COMMIT":
		c.inTx[conn] = false
		c.writes++
	case "ROLLBACK":
		c.inTx[conn] = false
	case "INSERT", "UPDATE", "DELETE", "WITH":
		if !c.inTx[conn] {
			c.writes++
		}
	}
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func firstWord(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimRight(f[0], ";")
}

// Snapshot is what a Counter saw.
type Snapshot struct {
	Calls  map[string]int
	Writes int
}

// RoundTrips is every counted call: AWS operations and SQL statements.
func (s Snapshot) RoundTrips() int {
	n := 0
	for _, v := range s.Calls {
		n += v
	}
	return n
}

// Count returns the calls whose key starts with prefix ("DynamoDB.",
// "SQL.COMMIT").
func (s Snapshot) Count(prefix string) int {
	n := 0
	for k, v := range s.Calls {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// String lists the calls, sorted: "DynamoDB.PutItem=1 SQL.COMMIT=1 ...".
func (s Snapshot) String() string {
	keys := make([]string, 0, len(s.Calls))
	for k := range s.Calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, s.Calls[k]))
	}
	return strings.Join(parts, " ")
}

// Take returns the counts since the last Take and resets them.
func (c *Counter) Take() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Calls: c.calls, Writes: c.writes}
	c.calls, c.writes = map[string]int{}, 0
	return s
}
