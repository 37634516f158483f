package model

// Bodies real servers send. The llama.cpp error bodies and testdata/llamacpp
// were captured from llama-server (llama.cpp as shipped in node-llama-cpp
// 3.21.1, --jinja, toy.gguf and untrained.gguf of ../shared/realmodel, -c
// 2048); the other llama.cpp bodies below are shaped like them, with
// content chosen for the test. OpenAI's and vLLM's are their documented
// error bodies.

const (
	llamaBadReplyBody = `{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}`
	llamaContextBody  = `{"error":{"code":400,"message":"request (5318 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5318,"n_ctx":2048}}`

	openAIContextBody  = `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	vllmContextBody    = `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`
	vllmOldContextBody = `{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`
)

const llamaText = `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"TASK_COMPLETE: done"}}],"created":1764680000,"model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion","usage":{"completion_tokens":7,"prompt_tokens":112,"total_tokens":119,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-x","timings":{"cache_n":0,"prompt_n":112,"prompt_ms":20.1,"prompt_per_token_ms":0.18,"prompt_per_second":5572.1,"predicted_n":7,"predicted_ms":3.2,"predicted_per_token_ms":0.46,"predicted_per_second":2187.5}}`

const llamaLength = `{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"qqzv wlo pfa"}}],"created":1764680000,"model":"untrained","system_fingerprint":"b1-0000000","object":"chat.completion","usage":{"completion_tokens":16,"prompt_tokens":40,"total_tokens":56},"id":"chatcmpl-y"}`

var llamaStreamText = []string{
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"TASK"}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"_COMPLETE"}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":": "}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"done"}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1764680000,"id":"chatcmpl-s","model":"toy","system_fingerprint":"b1-0000000","object":"chat.completion.chunk","usage":{"completion_tokens":5,"prompt_tokens":112,"total_tokens":117},"timings":{"prompt_n":112,"prompt_ms":20.1,"predicted_n":5,"predicted_ms":3.1}}` + "\n\n",
	"data: [DONE]\n\n",
}

var llamaStreamToolCall = []string{
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"id":"Vx3","type":"function","function":{"name":"workspace_write","arguments":"{\"path\":"}}]}}],"object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"notes.txt\",\"content\":\"hi\"}"}}]}}],"object":"chat.completion.chunk"}` + "\n\n",
	`data: {"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}],"object":"chat.completion.chunk","usage":{"completion_tokens":21,"prompt_tokens":300,"total_tokens":321}}` + "\n\n",
	"data: [DONE]\n\n",
}

const llamaModels = `{"models":[{"name":"toy.gguf","model":"toy.gguf","modified_at":"","size":"","digest":"","type":"model","description":"","tags":[""],"capabilities":["completion"],"parameters":"","details":{"parent_model":"","format":"gguf","family":"","families":[""],"parameter_size":"","quantization_level":""}}],"object":"list","data":[{"id":"toy.gguf","object":"model","created":1764680000,"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":300,"n_ctx_train":1024,"n_embd":64,"n_params":131072,"size":524288}}]}`
