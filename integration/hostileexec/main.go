// Command hostileexec is a hostile executor for taskhost's confinement
// tests, built only with the SDK as any third-party executor would be (kind
// "hostileexec"). Its one step tries to reach what a plugin must never
// reach — the store, its WAL, the host key, another task's workspace, the
// daemon's environment, the daemon's API as the daemon's own user — and to
// escape by signalling the daemon, opening a network socket and running a
// shell. Beside the SDK it uses only the API's generated client. It completes with a result naming
// each probe and what happened:
//
//	{"probes": {"read_store": "refused: permission denied", ...}}
//
// Every value starts with "refused: " or "allowed: ". The spec names the
// victim task whose workspace it goes after and, optionally, a listening
// unix socket standing for a root daemon that trusts uid 0 (docker,
// systemd):
//
//	{"goal": "...", "hostileexec": {"victim": "t_...", "socket": "/path", "data_dir": "/path"}}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

type executor struct{}

func (executor) Describe() sdk.Description {
	return sdk.Description{Kind: "hostileexec", Version: "1.0.0", CheckpointSchemas: []string{"hostileexec/1"}, Capabilities: []string{"hostile"}}
}

type spec struct {
	Goal        string `json:"goal"`
	HostileExec struct {
		Victim string `json:"victim"`
		Socket string `json:"socket"` // a root daemon's socket that trusts its peer's uid
		// DataDir is the data dir, as an attacker who read the config
		// would know it; "" guesses it from the working dir.
		DataDir string `json:"data_dir"`
	} `json:"hostileexec"`
}

func (executor) Step(_ context.Context, _ sdk.Host, req sdk.StepRequest) (sdk.StepResult, error) {
	var s spec
	if err := json.Unmarshal(req.Spec, &s); err != nil {
		return sdk.Fail("executor_failed", "hostileexec: spec: "+err.Error()), nil
	}
	probes := probe(s.HostileExec.Victim, s.HostileExec.Socket, s.HostileExec.DataDir)
	result, err := json.Marshal(map[string]any{"probes": probes})
	if err != nil {
		return sdk.StepResult{}, err
	}
	return sdk.Complete("probed", result, nil), nil
}

func outcome(err error, allowed string) string {
	if err != nil {
		return "refused: " + err.Error()
	}
	return "allowed: " + allowed
}

func unwrapped(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// probe tries each escape against data, or, when data is "", against the
// dir two levels above the plugin's working dir (DATA/plugins/run-XXXX
// for a plugin of the daemon's uid), which is what an attacker would
// assume.
func probe(victim, socket, data string) map[string]string {
	p := map[string]string{}
	if data == "" {
		cwd, _ := os.Getwd()
		data = filepath.Dir(filepath.Dir(cwd))
	}
	p["data_dir_guess"] = "allowed: " + data // informational

	read := func(name, path string) {
		b, err := os.ReadFile(path)
		p[name] = outcome(unwrapped(err), fmt.Sprintf("read %d bytes of %s", len(b), path))
	}
	read("read_store", filepath.Join(data, "taskhost.db"))
	read("read_wal", filepath.Join(data, "taskhost.db-wal"))
	read("read_host_key", filepath.Join(data, "host.key"))
	_, err := os.ReadDir(data)
	p["list_data_dir"] = outcome(unwrapped(err), "listed "+data)

	ws := filepath.Join(data, "workspaces", victim)
	_, err = os.ReadDir(ws)
	p["list_victim_workspace"] = outcome(unwrapped(err), "listed "+ws)
	read("read_victim_file", filepath.Join(ws, "victim.txt"))
	err = os.WriteFile(filepath.Join(ws, "planted.txt"), []byte("planted by hostileexec"), 0o644)
	p["plant_in_victim_workspace"] = outcome(unwrapped(err), "planted "+ws+"/planted.txt")

	daemon := os.Getppid()
	read("read_daemon_environ", "/proc/"+strconv.Itoa(daemon)+"/environ")
	mem, err := os.Open("/proc/" + strconv.Itoa(daemon) + "/mem")
	if err == nil {
		mem.Close()
	}
	p["open_daemon_memory"] = outcome(unwrapped(err), "opened the daemon's memory")
	p["signal_daemon"] = outcome(syscall.Kill(daemon, 0), "may signal the daemon")

	out, err := exec.Command("/bin/sh", "-c", "echo shell ran").CombinedOutput()
	p["fork_exec_shell"] = outcome(err, string(out))
	// No fork: replace this process (it would never return on success).
	p["exec_shell"] = outcome(syscall.Exec("/bin/sh", []string{"sh", "-c", "exit 0"}, nil), "exec'd")

	// The daemon's own API, as the daemon's uid: a principal.
	p["call_daemon_api"] = callAPI(filepath.Join(data, "taskhost.sock"))

	if socket != "" {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		p["connect_root_socket"] = outcome(err, "connected to "+socket)
	}

	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.Close(fd)
	}
	p["inet_socket"] = outcome(err, "opened a TCP socket")
	return p
}

// callAPI lists the tasks of whichever principal the daemon takes this
// process for.
func callAPI(sock string) string {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return outcome(err, "")
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := apipb.NewTaskServiceClient(conn).ListTasks(ctx, &apipb.ListTasksRequest{})
	if err != nil {
		return outcome(err, "")
	}
	return outcome(nil, fmt.Sprintf("listed %d tasks of the daemon's principal", len(resp.GetTasks())))
}

func main() {
	sdk.Serve(executor{})
}
