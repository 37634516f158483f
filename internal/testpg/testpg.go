// Package testpg gives tests a real, empty PostgreSQL database of their own.
//
// The cluster is, in order of preference:
//
//   - the one TASKHOST_TEST_POSTGRES names: a DSN of an administrative
//     database (e.g. "host=/tmp/pg user=postgres dbname=postgres") whose
//     user may CREATE and DROP DATABASE;
//   - a throw-away cluster that Main starts once per test binary when
//     initdb and pg_ctl are found (on PATH or under /usr/lib/postgresql/*/bin):
//     in a temporary directory (on /dev/shm where it is a tmpfs),
//     listening only on a unix socket there (no TCP), run as the postgres
//     user when the tests run as root (PostgreSQL refuses root), and
//     stopped when the tests end.
//
// Without either, DSN skips the test with the reason: never a fake.
//
// A package whose tests use DSN calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { testpg.Main(m) }
package testpg

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// EnvDSN names the environment variable holding the admin DSN of the
// cluster tests use. Main sets it when it starts a cluster itself, so the
// test binary's subprocesses (a daemon under test) reach the same one.
const EnvDSN = "TASKHOST_TEST_POSTGRES"

// SkipReason is why DSN skips when there is no cluster.
const SkipReason = "PostgreSQL tests need initdb/pg_ctl (apt-get install postgresql) or " + EnvDSN + " (a DSN of an admin database)"

// Main is Run followed by os.Exit with its status, for a TestMain with
// nothing else to do.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs the tests of m, with a throw-away cluster started first when
// EnvDSN is unset and PostgreSQL's binaries are installed, and returns
// their exit status. A cluster that cannot start fails the run: the
// binaries are there, so a skip would hide a broken set-up. Call it from
// TestMain, in place of m.Run.
func Run(m *testing.M) int {
	// The cluster's postmaster dies with this thread (Pdeathsig), which
	// must therefore live as long as the tests: TestMain's is locked.
	runtime.LockOSThread()
	if os.Getenv(EnvDSN) != "" {
		return m.Run()
	}
	bin := findBin()
	if bin == "" {
		return m.Run() // DSN skips
	}
	c, err := startCluster(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testpg: %v\n", err)
		return 1
	}
	defer c.stop()
	os.Setenv(EnvDSN, c.dsn) //nolint:errcheck // a valid name and value
	defer os.Unsetenv(EnvDSN)
	return m.Run()
}

// DSN creates a fresh, empty database on the cluster and returns its DSN;
// the database is dropped when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(EnvDSN)
	if admin == "" {
		if findBin() != "" {
			t.Fatalf("testpg: PostgreSQL is installed but %s is unset: the package's TestMain must call testpg.Main(m) or testpg.Run(m)", EnvDSN)
		}
		t.Skip(SkipReason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatalf("testpg: %s: %v", EnvDSN, err)
	}
	defer db.Close()
	var b [8]byte
	rand.Read(b[:]) //nolint:errcheck // never fails
	name := "taskhost_test_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("testpg: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := sql.Open("pgx", admin)
		if err != nil {
			t.Errorf("testpg: %v", err)
			return
		}
		defer db.Close()
		// FORCE: a store a failed test left open must not keep it.
		if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("testpg: drop database %s: %v", name, err)
		}
	})
	dsn, err := WithDatabase(admin, name)
	if err != nil {
		t.Fatalf("testpg: %v", err)
	}
	return dsn
}

// WithDatabase is dsn (a URL or key=value pairs) naming database db
// instead of its own.
func WithDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("%s is not a valid URL", EnvDSN)
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	return dsn + " dbname=" + db, nil // a later key overrides an earlier one
}

// findBin returns the directory of initdb and pg_ctl, or "".
func findBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// The newest major version first: "15" sorts after "9" as a number.
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// cluster is a running throw-away postmaster.
type cluster struct {
	dir  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	dsn  string
	bin  string
	// orphan: the postmaster does not die with the thread that started it
	// (a Private cluster, started from a test's goroutine: its thread may
	// end before the test does); the test's clean-up stops it.
	orphan bool
}

// startCluster initialises a cluster in a new temporary directory and
// starts its postmaster on a unix socket there.
func startCluster(bin string) (*cluster, error) {
	c, err := initCluster(bin)
	if err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	return c, nil
}

// memDir is the directory a throw-away cluster lives in: /dev/shm where
// it is a writable tmpfs, else the system temp dir. Every test makes and
// drops a database of about 300 files, and ext4 makes each new file by
// scanning past the inodes deleted in the last seconds: on a disk, that
// scan was half of the store tests' CPU (store: 85-89 s of CPU and 49-51 s
// wall on ext4, 40-42 s and 27 s on tmpfs, 2 cores).
func memDir() string {
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if syscall.Statfs("/dev/shm", &st) == nil && st.Type == tmpfsMagic && syscall.Access("/dev/shm", 0o7) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// initCluster makes a new cluster's directory and data, not started.
func initCluster(bin string) (*cluster, error) {
	dir, err := os.MkdirTemp(memDir(), "taskhost-pg-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, bin: bin}
	cred, err := credential(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.cred = cred
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(sock, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	c.dsn = fmt.Sprintf("host=%s user=postgres dbname=postgres sslmode=disable", sock)
	return c, nil
}

// start starts the cluster's postmaster and waits until it accepts
// connections.
func (c *cluster) start() error {
	data, sock := filepath.Join(c.dir, "data"), filepath.Join(c.dir, "sock")
	log, err := os.OpenFile(filepath.Join(c.dir, "postgres.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	c.cmd = exec.Command(filepath.Join(c.bin, "postgres"), "-D", data, "-k", sock,
		"-c", "listen_addresses=", "-c", "max_connections=200", "-c", "shared_buffers=32MB",
		// A throw-away cluster need not survive a power cut; without
		// fsync a CREATE DATABASE per test is cheap on a shared disk.
		"-c", "fsync=off")
	c.cmd.Stdout, c.cmd.Stderr = log, log
	// Pdeathsig: a test binary killed before its clean-up takes the
	// postmaster with it (Go sets it after the credential change).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.orphan {
		c.cmd.SysProcAttr.Pdeathsig = 0
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	done := make(chan struct{})
	c.done = done
	cmd := c.cmd
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // the exit is reported by done
	if err := c.wait(); err != nil {
		c.halt()
		out, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
		return fmt.Errorf("postgres did not start: %v\n%s", err, out)
	}
	return nil
}

// wait polls until the postmaster accepts a connection (30 s at most).
func (c *cluster) wait() error {
	db, err := sql.Open("pgx", c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case time.Now().After(deadline):
			return err
		}
		select {
		case <-c.done:
			return errors.New("the postmaster exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// halt shuts the postmaster down fast (SIGQUIT: no checkpoint, the next
// start recovers from the WAL), keeping its data.
func (c *cluster) halt() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // it may have exited
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
			<-c.done
		}
	}
}

// stop halts the postmaster and removes its directory.
func (c *cluster) stop() {
	c.halt()
	os.RemoveAll(c.dir)
}

// Cluster is a PostgreSQL cluster of one test's own, which the test may
// stop and start again (an outage it controls).
type Cluster struct{ c *cluster }

// Private starts a cluster of the test's own, stopped and removed when the
// test ends. It skips, with the reason, where PostgreSQL's binaries are
// not installed (a shared cluster named by EnvDSN cannot be stopped).
func Private(t testing.TB) *Cluster {
	t.Helper()
	bin := findBin()
	if bin == "" {
		t.Skip("a private PostgreSQL cluster needs initdb and postgres installed (apt-get install postgresql)")
	}
	c, err := initCluster(bin)
	if err != nil {
		t.Fatalf("testpg: %v", err)
	}
	c.orphan = true
	if err := c.start(); err != nil {
		os.RemoveAll(c.dir)
		t.Fatalf("testpg: %v", err)
	}
	t.Cleanup(c.stop)
	return &Cluster{c: c}
}

// DSN creates database name on the cluster and returns its DSN.
func (p *Cluster) DSN(t testing.TB, name string) string {
	t.Helper()
	db, err := sql.Open("pgx", p.c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("testpg: create database: %v", err)
	}
	dsn, err := WithDatabase(p.c.dsn, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Stop shuts the cluster down at once (as a crash would), keeping its data.
func (p *Cluster) Stop(t testing.TB) {
	t.Helper()
	p.c.halt()
}

// Start starts the stopped cluster again and waits until it accepts
// connections.
func (p *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := p.c.start(); err != nil {
		t.Fatalf("testpg: %v", err)
	}
}

// credential is the postgres user's when running as root (initdb and
// postgres refuse root), after giving it dir; nil otherwise.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as another user, and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// PeerAuth makes the cluster authenticate unix-socket logins of role by
// peer credentials — the OS user connecting must be named role, as with
// Debian's default pg_hba.conf — creating role, and opens the socket dir
// to every local user. The test harness's own user keeps trust. It
// returns the socket dir, for psql -h.
func (p *Cluster) PeerAuth(t testing.TB, role string) string {
	t.Helper()
	hba := filepath.Join(p.c.dir, "data", "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all postgres trust\nlocal all all peer\n"), 0o600); err != nil {
		t.Fatalf("testpg: %v", err)
	}
	if p.c.cred != nil {
		if err := os.Chown(hba, int(p.c.cred.Uid), int(p.c.cred.Gid)); err != nil {
			t.Fatalf("testpg: %v", err)
		}
	}
	sock := filepath.Join(p.c.dir, "sock")
	for _, d := range []string{p.c.dir, sock} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("testpg: %v", err)
		}
	}
	db, err := sql.Open("pgx", p.c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`CREATE ROLE "` + role + `" LOGIN`, `SELECT pg_reload_conf()`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("testpg: %s: %v", q, err)
		}
	}
	return sock
}
