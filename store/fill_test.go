package store

import (
	"context"
	"testing"
)

func TestFillThenRecover(t *testing.T) {
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		if err := s.Fill(ctx, "p", 200, 5, defaultBudgets()); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Recover(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Interrupted) != 5 || rec.AttemptsClosed != 5 {
			t.Fatalf("recovered %d tasks and %d attempts, want 5 and 5", len(rec.Interrupted), rec.AttemptsClosed)
		}
		if err := s.Fill(ctx, "p", 1, 2, defaultBudgets()); err == nil {
			t.Fatal("live > n accepted")
		}
	})
}
