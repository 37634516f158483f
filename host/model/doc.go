// Package model holds the model providers behind the host's CallModel
// service (DESIGN.md §4, §6). Executors never call a model themselves: they
// ask the host, the host charges the model budget and calls a [Provider].
//
// Two providers exist, chosen by config.Model.Provider:
//
//   - "scripted": deterministic replies from a JSON script, so tests and the
//     demo need no network (format below).
//   - "openai": an OpenAI-compatible chat-completions endpoint.
//
// Every provider returns an assistant [Message] within fixed bounds
// (content longer than [MaxContentBytes] is cut; [MaxToolCalls],
// [MaxArgumentsBytes] and [MaxToolNameBytes] are enforced) and fails with an
// [*Error] whose [ErrorKind] callers branch on.
//
// # The openai provider
//
// POST {base_url}/chat/completions with "model", "messages" (assistant
// "tool_calls" and tool "tool_call_id" as the protocol has them), when the
// request offers any, "tools" ([{"type":"function","function":{...}}], each
// schema compacted), "max_tokens" and the sampling options of config.Model
// (a Request's Options override them), "stream" when configured, and the
// members of extra_body. The key is read once, at [New], from the
// environment variable named by api_key_env and sent as "Authorization:
// Bearer ..."; it never appears in an error. Each attempt waits at most
// timeout_seconds for the server's next bytes and max_call_seconds in all.
// A 429 or 5xx is retried up to max_retries times after the server's
// Retry-After (seconds or HTTP date, capped at 60 s) or else an exponential
// backoff with jitter; the wait ends early when ctx does. 401/403 fail at
// once ([KindAuth]); so do a context-length refusal ([KindContextExceeded])
// and llama.cpp's 500 for a reply it could not parse ([KindBadReply]). The
// response body is read up to [MaxResponseBodyBytes]; a streamed one event
// by event (each at most that), assembled and checked as a whole one is.
// [Response] carries the finish reason and the usage the server reported.
// docs/model.md is the operator's account.
//
// # The script format
//
// A script is a JSON object (at most [MaxScriptBytes], at most
// [MaxScriptRules] rules), decoded strictly: an unknown field is an error
// naming the field and the rule.
//
//	{
//	  "version": 1,
//	  "description": "free text",
//	  "rules": [
//	    {
//	      "name": "legacy: step 1",              // optional, shown in errors
//	      "note": "free text",                   // optional, ignored
//	      "when": {                              // every condition given must hold; {} matches anything
//	        "last_role": "user",                 // role of the LAST message: system|user|assistant|tool
//	        "contains": " step 1/",              // substring of the LAST message's content
//	        "tool": "shell.run",                 // the LAST message is the result of a call to this tool
//	        "system_contains": "goal text",      // substring of some system message
//	        "any_contains": "[rlm root]",        // substring of some message, any role
//	        "depth": 1,                          // Request.Depth, as the host computed it
//	        "assistant_turns": 0                 // number of assistant messages in the history
//	      },
//	      "reply": {                             // content and/or tool_calls, or error
//	        "content": "text",
//	        "tool_calls": [{"name": "workspace.write", "arguments": {"path": "notes.md"}}],
//	        "error": {"kind": "rate_limited", "status": 429, "message": "simulated"},
//	        "finish_reason": "length",           // with content or tool_calls: as an endpoint reports it
//	        "usage": {"prompt_tokens": 1091, "completion_tokens": 45}
//	      }
//	    }
//	  ]
//	}
//
// (The comments above are for this page only: JSON has none.)
//
// Rules are tried in order and the first whose conditions all hold replies;
// put specific rules before general ones and a default ("when": {}) last.
// When none matches, Complete fails with [KindScript] naming the last
// message's role and a short excerpt of it.
//
// Matching details: a tool message names its call only by ID, so "tool" looks
// the name up in the assistant message that made the call. "arguments" must
// be a JSON object (absent means {}); it reaches the tool as compact JSON
// text. Tool call IDs are deterministic: call_N, numbered after the tool calls
// already in the request's history, so the IDs of one conversation never
// collide. An "error" reply fails the call with that [ErrorKind] (its
// String name: "auth", "rate_limited", "server", "bad_response", "canceled",
// "timeout", "script", "request", "transport", "bad_reply",
// "context_exceeded"), to exercise the host's
// failure paths.
//
// The legacy executor's user prompt contains "[long-horizon task <id> step
// <n>/<max>]", so "contains": " step 2/" selects step 2 (the leading space
// keeps "step 12/" from matching "step 2/"). Within one step, the first call
// ends with the user prompt and later calls end with a tool result.
//
// The embedded default script (used when config.Model.Script is empty; a copy
// is examples/scripts/legacy-demo.json) has three sections, in this order:
//
//  1. "rlm: ..." rules for the MACHINE-SPIRIT rlm graph: a sub-call (marker
//     "[rlm sub]") gets a short summary; the root (marker "[rlm root]") gets
//     a JSON plan (machinespirit.plan/1) that peeks at the context, asks
//     one sub-call to summarise it and gives that as the final answer on its
//     first iteration, and a plan with only a final step after.
//  2. "legacy: ..." rules for a 3-step legacy task: step 1 writes notes.md
//     with workspace.write and then says "wrote notes"; step 2 calls
//     shell.run {"command": "echo hello"} (approval-gated by default) and then
//     says "ran the command"; step 3 replies "TASK_COMPLETE: report ready".
//  3. A default that completes the task, so the demo always ends.
package model
