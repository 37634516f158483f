package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/model"
	"github.com/taskhost/taskhost/host/plugin"
)

// TestModelRequestBounds: the message count and size limits, at the limit
// and one past it.
func TestModelRequestBounds(t *testing.T) {
	t.Parallel()
	msgs := func(n, size int) []model.Message {
		out := make([]model.Message, n)
		for i := range out {
			out[i].Role = "user"
		}
		if n > 0 {
			out[0].Content = strings.Repeat("x", size)
		}
		return out
	}
	tests := []struct {
		name    string
		call    plugin.ModelCall
		wantErr string // "" accepted
	}{
		{"no messages", plugin.ModelCall{}, "needs 1..256 messages, got 0"},
		{"messages at the limit", plugin.ModelCall{Messages: msgs(maxModelMessages, 0)}, ""},
		{"messages past the limit", plugin.ModelCall{Messages: msgs(maxModelMessages+1, 0)}, "got 257"},
		{"bytes at the limit", plugin.ModelCall{Messages: msgs(1, maxMessageBytes)}, ""},
		{"bytes past the limit", plugin.ModelCall{Messages: msgs(1, maxMessageBytes+1)}, "262145 bytes, limit 262144"},
		{"tool call arguments count", plugin.ModelCall{Messages: append(msgs(1, maxMessageBytes),
			model.Message{Role: "assistant", ToolCalls: []model.ToolCall{{Arguments: "{}"}}})}, "262146 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := modelRequest(tt.call)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *plugin.FieldError
			if !errors.As(err, &fe) || fe.Field != "messages" || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want a messages plugin.FieldError containing %q", err, tt.wantErr)
			}
		})
	}
}
