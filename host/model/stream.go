package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// The streamed reply (stream: true): server-sent events, each a
// "data: {chunk}" line (or several, joined by newlines) ended by a blank
// line, the last "data: [DONE]". A chunk carries a delta of the one choice:
// content to append, tool calls by index (the first delta of a call has
// its id and name, later ones more of its arguments), and at the end a
// finish_reason; usage comes in a chunk of its own (stream_options
// include_usage) or with the last one (llama.cpp). A failure after the
// headers is a chunk {"error": {...}} (llama.cpp: an error event with the
// same body as the status error it replaces). Lines starting with ':' are
// keep-alives.

type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []wireToolCall  `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// streamCall is one tool call as its deltas arrive.
type streamCall struct {
	id, name string
	args     strings.Builder
}

// streamReply assembles a streamed reply within the provider's bounds.
type streamReply struct {
	content strings.Builder
	cut     bool
	calls   []*streamCall
	finish  string
	usage   *wireUsage
	chunks  int
}

// errStreamDone ends the read loop at "[DONE]".
var errStreamDone = errors.New("stream done")

// add applies one chunk; a non-empty problem is the reason the reply is
// not usable, told by its kind.
func (sr *streamReply) add(c streamChunk) (ErrorKind, string) {
	if c.Usage != nil {
		sr.usage = c.Usage
	}
	if len(c.Choices) == 0 {
		return 0, ""
	}
	ch := c.Choices[0]
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		sr.finish = *ch.FinishReason
	}
	if text, ok := decodeContent(ch.Delta.Content); !ok {
		return KindBadResponse, "a delta's content is neither a string nor a list of text parts"
	} else if text != "" {
		sr.chunks++
		if !sr.cut {
			// Kept a little past the bound, so checkReply cuts it on a
			// rune boundary as it does an unstreamed reply.
			sr.content.WriteString(text)
			sr.cut = sr.content.Len() > MaxContentBytes
		}
	}
	for _, tc := range ch.Delta.ToolCalls {
		sr.chunks++
		i := len(sr.calls) - 1
		if tc.Index != nil {
			i = *tc.Index
		} else if tc.ID != "" || i < 0 {
			i = len(sr.calls) // no index: a new id starts a new call
		}
		if i < 0 || i > MaxToolCalls {
			return KindBadReply, "a tool call's index is out of range: at most " + itoa(MaxToolCalls) + " tool calls are accepted"
		}
		for len(sr.calls) <= i {
			sr.calls = append(sr.calls, &streamCall{})
		}
		call := sr.calls[i]
		if tc.ID != "" {
			call.id = tc.ID
		}
		if tc.Function.Name != "" {
			call.name += tc.Function.Name
		}
		if len(call.name) > MaxToolNameBytes*2 {
			return KindBadReply, "a tool call's name is longer than " + itoa(MaxToolNameBytes) + " bytes"
		}
		var part string
		if raw := bytes.TrimSpace(tc.Function.Arguments); len(raw) > 0 && raw[0] == '"' {
			if json.Unmarshal(raw, &part) != nil {
				return KindBadResponse, "a tool call's arguments delta is not a JSON string"
			}
		} else if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
			part = string(raw) // a bare object, as some servers send
		}
		call.args.WriteString(part)
		if call.args.Len() > MaxArgumentsBytes {
			return KindBadReply, "tool call " + itoa(i+1) + " (" + excerpt(call.name, MaxToolNameBytes) + "): arguments are over " + itoa(MaxArgumentsBytes) + " bytes"
		}
	}
	return 0, ""
}

// readStream reads a streamed reply to its end, reporting progress at most
// once a second.
func (p *openAI) readStream(ctx, actx context.Context, body io.Reader, status, priorCalls int, names toolNames, progress func(Progress), sent time.Time) (Response, *Error) {
	var sr streamReply
	lastReport := sent
	report := func() {
		if progress == nil {
			return
		}
		if now := p.now(); now.Sub(lastReport) >= progressEvery {
			lastReport = now
			progress(Progress{Chunks: sr.chunks, Elapsed: now.Sub(sent)})
		}
	}
	total := 0
	var data []byte // the data lines of the event being read
	rd := bufio.NewReaderSize(body, 64<<10)
	event := func() *Error {
		payload := bytes.TrimSpace(data)
		data = data[:0]
		if e := p.streamEvent(&sr, payload, status); e != nil {
			return e
		}
		if len(payload) > 0 {
			report()
		}
		return nil
	}
	for {
		line, err := readLine(rd, MaxResponseBodyBytes)
		total += len(line) + 1
		if err == nil && total > maxStreamBytes {
			return Response{}, p.fail(KindBadResponse, status, nil, "the streamed reply exceeds %d bytes", maxStreamBytes)
		}
		if errors.Is(err, errLineTooLong) {
			return Response{}, p.fail(KindBadResponse, status, nil, "a streamed event exceeds %d bytes", MaxResponseBodyBytes)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Response{}, p.roundTripError(ctx, actx, err, "reading the streamed reply")
		}
		switch {
		case len(line) == 0 || errors.Is(err, io.EOF):
			if len(line) > 0 {
				data = appendData(data, line)
			}
			if e := event(); e != nil {
				if errors.Is(e.cause, errStreamDone) {
					return p.streamed(&sr, status, priorCalls, names)
				}
				return Response{}, e
			}
		case line[0] == ':':
			// a keep-alive comment
		default:
			data = appendData(data, line)
		}
		if len(data) > MaxResponseBodyBytes {
			return Response{}, p.fail(KindBadResponse, status, nil, "a streamed event exceeds %d bytes", MaxResponseBodyBytes)
		}
		if errors.Is(err, io.EOF) {
			if sr.finish == "" {
				// Closed before the server said the reply was over: a
				// server killed mid-generation, not a short reply.
				return Response{}, p.fail(KindTransport, status, io.ErrUnexpectedEOF, "reading the streamed reply: the connection closed before the reply ended (%d chunks received)", sr.chunks)
			}
			return p.streamed(&sr, status, priorCalls, names)
		}
	}
}

// streamEvent adds one server-sent event's payload to sr: nothing for an
// empty one, errStreamDone for [DONE], a chunk's error classified as the
// response's status would be.
func (p *openAI) streamEvent(sr *streamReply, payload []byte, status int) *Error {
	if len(payload) == 0 {
		return nil
	}
	if bytes.Equal(payload, []byte("[DONE]")) {
		return &Error{cause: errStreamDone}
	}
	var c streamChunk
	if err := json.Unmarshal(payload, &c); err != nil {
		return p.fail(KindBadResponse, status, err, "a streamed chunk is not valid JSON: %v", err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		// Classified as if it had been the status of the response.
		var code struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(c.Error, &code)
		if code.Code < 400 || code.Code > 599 {
			code.Code = 500
		}
		e := p.statusError(code.Code, nil, payload)
		e.RetryAfter = 0
		return e
	}
	if kind, problem := sr.add(c); problem != "" {
		return p.fail(kind, status, nil, "%s", problem)
	}
	return nil
}

// appendData adds an SSE line's "data:" value to the event's data.
func appendData(data, line []byte) []byte {
	v, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return data // "event:", "id:", "retry:" lines carry nothing used here
	}
	if len(data) > 0 {
		data = append(data, '\n')
	}
	return append(data, bytes.TrimPrefix(v, []byte(" "))...)
}

// streamed assembles the reply a finished stream delivered.
func (p *openAI) streamed(sr *streamReply, status, priorCalls int, names toolNames) (Response, *Error) {
	calls := make([]ToolCall, 0, len(sr.calls))
	for _, c := range sr.calls {
		args := strings.TrimSpace(c.args.String())
		if args == "" {
			args = "{}"
		}
		calls = append(calls, ToolCall{ID: c.id, Name: c.name, Arguments: args})
	}
	return p.reply(sr.content.String(), calls, sr.finish, sr.usage, status, priorCalls, names)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its end ("\n" or "\r\n"), refusing one
// longer than limit.
func readLine(rd *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := rd.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > limit+2 {
			return nil, errLineTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, err
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
