package config

import (
	"strings"
	"testing"
)

// The [model] request options: each at its bounds and one past them, with
// an error naming the key, the value and the range.
func TestModelRequestOptions(t *testing.T) {
	long := strings.Repeat("x", MaxModelStopBytes)
	tests := []struct {
		name string
		src  string
		key  string // "" when accepted
		want []string
	}{
		{name: "max_tokens 0 leaves it out", src: "max_tokens = 0"},
		{name: "max_tokens below the floor", src: "max_tokens = 15", key: "model.max_tokens", want: []string{"15", "between 16 and"}},
		{name: "context_tokens 0 is unknown", src: "context_tokens = 0"},
		{name: "max_tokens must leave room for a prompt", src: "context_tokens = 1024\nmax_tokens = 1024", key: "model.max_tokens", want: []string{"1024", "less than model.context_tokens"}},
		{name: "temperature 0", src: "temperature = 0"},
		{name: "temperature 2.0", src: "temperature = 2.0"},
		{name: "temperature 2.01", src: "temperature = 2.01", key: "model.temperature", want: []string{"2.01", "between 0 and 2"}},
		{name: "temperature -0.1", src: "temperature = -0.1", key: "model.temperature", want: []string{"-0.1"}},
		{name: "temperature nan", src: "temperature = nan", key: "model.temperature", want: []string{"finite"}},
		{name: "temperature as a string", src: `temperature = "0.2"`, key: "model.temperature", want: []string{"expected number", "without quotes"}},
		{name: "top_p 1", src: "top_p = 1"},
		{name: "top_p 0", src: "top_p = 0", key: "model.top_p", want: []string{"above 0"}},
		{name: "top_p 1.5", src: "top_p = 1.5", key: "model.top_p", want: []string{"1.5"}},
		{name: "seed 0", src: "seed = 0"},
		{name: "seed max", src: "seed = 2147483647"},
		{name: "seed past max", src: "seed = 2147483648", key: "model.seed", want: []string{"2147483648", "between 0 and 2147483647"}},
		{name: "seed negative", src: "seed = -1", key: "model.seed", want: []string{"-1"}},
		{name: "four stops", src: `stop = ["a", "b", "c", "` + long + `"]`},
		{name: "five stops", src: `stop = ["a", "b", "c", "d", "e"]`, key: "model.stop", want: []string{"5 entries", "at most 4"}},
		{name: "a stop too long", src: `stop = ["` + long + `x"]`, key: "model.stop", want: []string{"[0]", "65 bytes", "1..64"}},
		{name: "an empty stop", src: `stop = [""]`, key: "model.stop", want: []string{"0 bytes"}},
		{name: "extra_body object", src: `extra_body = '{"options": {"num_ctx": 8192}}'`},
		{name: "extra_body at its bound", src: `extra_body = '{"k": "` + strings.Repeat("v", MaxModelExtraBodyBytes-9) + `"}'`},
		{name: "extra_body past its bound", src: `extra_body = '{"k": "` + strings.Repeat("v", MaxModelExtraBodyBytes-8) + `"}'`, key: "model.extra_body", want: []string{"4097 bytes", "at most 4096"}},
		{name: "extra_body not an object", src: `extra_body = '[1]'`, key: "model.extra_body", want: []string{"JSON object"}},
		{name: "extra_body null", src: `extra_body = 'null'`, key: "model.extra_body", want: []string{"JSON object"}},
		{name: "extra_body sets max_tokens", src: `extra_body = '{"max_tokens": 5}'`, key: "model.extra_body", want: []string{`"max_tokens"`, "sets itself"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, "[model]\n"+tc.src+"\n")
			if tc.key == "" {
				if err != nil {
					t.Fatalf("should be accepted:\n%v", err)
				}
				return
			}
			p := wantOnly(t, err, tc.key, append([]string{tc.key}, tc.want...)...)
			t.Logf("%s (cfg %+v)", p.Message, cfg.Model)
		})
	}
}

func TestModelSamplingDecodes(t *testing.T) {
	cfg := mustParse(t, "[model]\ntemperature = 1\ntop_p = 0.5\nseed = 7\nstop = [\"</s>\"]\n")
	m := cfg.Model
	if m.Temperature == nil || *m.Temperature != 1 || m.TopP == nil || *m.TopP != 0.5 || m.Seed == nil || *m.Seed != 7 || len(m.Stop) != 1 {
		t.Fatalf("decoded %+v", m)
	}
	if def := Default().Model; def.Temperature != nil || def.TopP != nil || def.Seed != nil {
		t.Fatalf("the sampling options must be absent by default: %+v", def)
	}
}
