package sdk

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// dialFunc opens a connection to the host-services endpoint the host
// announced under a go-plugin broker id.
type dialFunc func(id uint32) (*grpc.ClientConn, error)

// hostCallOptions bounds host-services messages like every other message of
// the protocol; go-plugin's broker would otherwise allow ~2 GiB.
func hostCallOptions() grpc.DialOption {
	return grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(maxMessageBytes),
		grpc.MaxCallSendMsgSize(maxMessageBytes),
	)
}

// brokerDialer dials host services through the plugin's go-plugin broker.
func brokerDialer(b *plugin.GRPCBroker) dialFunc {
	return func(id uint32) (*grpc.ClientConn, error) {
		return b.DialWithOptions(id, hostCallOptions())
	}
}

// hostConns holds the one host-services connection of a plugin process.
//
// The host serves one long-lived endpoint per plugin process and names it by
// broker id in every StepRequest. The connection is dialled when a step
// first names an id, not when the executor first calls the host: go-plugin
// forgets an announced endpoint that nobody dials within 5 s, and an
// executor may well make its first host call later than that.
type hostConns struct {
	dial dialFunc

	mu   sync.Mutex
	id   uint32
	conn *grpc.ClientConn
}

func newHostConns(dial dialFunc) *hostConns {
	return &hostConns{dial: dial}
}

// client returns a client of the endpoint with broker id, reusing the
// connection while the id stays the same and redialling when the host
// announces another endpoint. A failed dial is not cached: the next step
// tries again.
func (h *hostConns) client(id uint32) (executorpb.HostServicesClient, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil && h.id == id {
		return executorpb.NewHostServicesClient(h.conn), nil
	}
	if h.conn != nil {
		// The old endpoint is gone or abandoned; its close error says
		// nothing about the new one.
		_ = h.conn.Close()
		h.conn = nil
	}
	conn, err := h.dial(id)
	if err != nil {
		return nil, fmt.Errorf("dial host services (broker id %d): %w", id, err)
	}
	h.id, h.conn = id, conn
	return executorpb.NewHostServicesClient(conn), nil
}

// close closes the cached connection, if any.
func (h *hostConns) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	err := h.conn.Close()
	h.conn = nil
	return err
}
