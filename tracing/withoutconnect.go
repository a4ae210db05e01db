package tracing

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// WithoutConnectTrace returns t without its pgx.ConnectTracer side: the statement hooks it has
// (QueryTracer, BatchTracer, CopyFromTracer, PrepareTracer) are passed on, the connect hooks
// are not. nil stays nil.
func WithoutConnectTrace(t pgx.QueryTracer) pgx.QueryTracer {
	if t == nil {
		return nil
	}
	if _, ok := t.(pgx.ConnectTracer); !ok {
		return t
	}
	return statementTracer{t}
}

// statementTracer is a tracer's statement hooks without its connect hooks: pgx's connect of an
// established session (Connector.ConnectPgx) is not a connect to trace again.
type statementTracer struct{ pgx.QueryTracer }

func (s statementTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if t, ok := s.QueryTracer.(pgx.BatchTracer); ok {
		return t.TraceBatchStart(ctx, conn, data)
	}
	return ctx
}

func (s statementTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if t, ok := s.QueryTracer.(pgx.BatchTracer); ok {
		t.TraceBatchQuery(ctx, conn, data)
	}
}

func (s statementTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if t, ok := s.QueryTracer.(pgx.BatchTracer); ok {
		t.TraceBatchEnd(ctx, conn, data)
	}
}

func (s statementTracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t, ok := s.QueryTracer.(pgx.CopyFromTracer); ok {
		return t.TraceCopyFromStart(ctx, conn, data)
	}
	return ctx
}

func (s statementTracer) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if t, ok := s.QueryTracer.(pgx.CopyFromTracer); ok {
		t.TraceCopyFromEnd(ctx, conn, data)
	}
}

func (s statementTracer) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if t, ok := s.QueryTracer.(pgx.PrepareTracer); ok {
		return t.TracePrepareStart(ctx, conn, data)
	}
	return ctx
}

func (s statementTracer) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	if t, ok := s.QueryTracer.(pgx.PrepareTracer); ok {
		t.TracePrepareEnd(ctx, conn, data)
	}
}
