package ctxsleep

import (
	"context"
	"testing"
	"time"
)

func TestSleepPasses(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 10*time.Millisecond) {
		t.Fatal("Sleep with a live context = false, want true")
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Fatalf("Sleep returned after %v, before its 10ms", d)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour's sleep returns at once: no test waits for it.
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with a cancelled context = true, want false")
	}
}
