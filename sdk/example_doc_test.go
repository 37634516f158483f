package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/taskhost/taskhost/sdk"
)

// releaseBranch is docs/executor-sdk.md's RequestInput example: a step asks
// its principal for a value and decodes the answer.
func releaseBranch(ctx context.Context, host sdk.Host) (sdk.StepResult, error) {
	v, err := host.RequestInput(ctx, "Which branch should I release?")
	if err != nil {
		return sdk.StepResult{}, err // rejected (the task has failed), cancelled, or an older host
	}
	var branch string
	if err := json.Unmarshal(v, &branch); err != nil {
		return sdk.StepResult{}, fmt.Errorf("the answer %s is not a branch name: %w", v, err)
	}
	return sdk.StepResult{Outcome: sdk.OutcomeComplete, Summary: "release " + branch}, nil
}

// warnLarge is docs/executor-sdk.md's logging example.
func warnLarge(n int) {
	log := sdk.Logger()
	log.Warn("checklist file is large", "items", n)
}

// The examples are compiled, not run: they need a host.
var _, _ = releaseBranch, warnLarge
