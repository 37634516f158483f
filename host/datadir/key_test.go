package datadir

import (
	"testing"

	"github.com/taskhost/taskhost/store"
)

func TestHostIDFromKey(t *testing.T) {
	t.Parallel()
	k1, k2 := make([]byte, 32), make([]byte, 32)
	k2[0] = 1
	id1, id2 := HostIDFromKey(k1), HostIDFromKey(k2)
	if id1 == id2 || id1 != HostIDFromKey(k1) {
		t.Fatalf("ids %s, %s: want stable per key and distinct across keys", id1, id2)
	}
	// A shared key: the machine and the data dir tell hosts apart.
	a, b := HostIDFromKey(k1, "m1", "/data"), HostIDFromKey(k1, "m2", "/data")
	if a == b || a == id1 || a != HostIDFromKey(k1, "m1", "/data") || HostIDFromKey(k1, "m1", "/d") == HostIDFromKey(k1, "m1/", "d") {
		t.Fatalf("shared-key ids %s, %s: want distinct per machine and dir, stable", a, b)
	}
	if err := store.CheckHostID(id1); err != nil {
		t.Fatalf("derived id %s: %v", id1, err)
	}
}
