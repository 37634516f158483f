package machinespirit

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestZZProbeStart(t *testing.T) {
	needSwipl(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, StateCacheDir: dir}
	New(ctx, cfg).Close()
	cfg = cfg.withDefaults()
	for i := 0; i < 6; i++ {
		s0 := time.Now()
		run := t.TempDir()
		src, _ := embeddedSources(nil)
		env := &runtimeEnv{dir: run, path: cfg.SwiplPath, env: workerEnv(run)}
		work, _ := makeWorkDir(run)
		tr, _ := os.Executable()
		env.work, env.trampoline = work, tr
		env.policy = workerPolicy(cfg, run, work)
		t0 := time.Since(s0)
		s := time.Now()
		_, line, _ := checkVersion(ctx, cfg.SwiplPath, cfg.SwiplVersion, env.env)
		t1 := time.Since(s)
		s = time.Now()
		env.cache = &stateCache{dir: dir, max: maxStateBytes}
		env.stateKey = stateKey(src.digest(), cfg.SwiplPath, line)
		if err := prepareRuntime(ctx, cfg, src, env); err != nil {
			t.Fatal(err)
		}
		t2 := time.Since(s)
		s = time.Now()
		w, _, err := helloWorker(ctx, cfg, env)
		if err != nil {
			t.Fatal(err)
		}
		t3 := time.Since(s)
		t.Logf("setup %v version %v prepare(%s) %v hello %v", t0, t1, env.stateFrom, t2, t3)
		w.kill(time.Second)
	}
}
