package legacy

import "github.com/taskhost/taskhost/sdk"

// stepLogChars is Zara's step_log_chars for a step: the bound of both the
// step's summary and the whole context message. It is 2000 unless the
// host bounds summaries tighter ([limits] summary_chars): Zara cuts the
// context at its step-log bound too. A looser host bound keeps 2000, the
// most a legacy checkpoint holds of a summary (docs/legacy.md).
func stepLogChars(req sdk.StepRequest) int {
	if n := req.SummaryChars; n > 0 && n < maxContextRunes {
		return n
	}
	return maxContextRunes
}
