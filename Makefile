# taskhost build entry points. `make help` lists them.
GO      ?= go
BIN     := bin
PROTOC  ?= protoc
# The protoc release the generated code is pinned to (Debian bookworm's
# protobuf-compiler). protoc-gen-go and protoc-gen-go-grpc are pinned in go.mod
# as tool dependencies.
PROTOC_VERSION := 3.21.12

.PHONY: all build test demo deps proto proto-check lint help clean

all: build

help:
	@echo "make build        build every binary into $(BIN)/"
	@echo "make test         run the whole test suite (what CI runs)"
	@echo "make demo         run the demo on a temporary data dir"
	@echo "make proto        regenerate shared/proto from the .proto files"
	@echo "make proto-check  fail when the committed generated code is stale"
	@echo "make lint         gofmt, go vet, staticcheck"

# The test executor goes to $(BIN)/test/, out of the directory the daemon
# discovers executors in (beside bin/taskhost): a fresh install must not
# list it. $(BIN)/test/ is a whole executor directory of its own (the
# others are hard links), for `taskhost bench` and bench/dbos.
#
# What every task starts — the trampoline and the executors — is linked
# statically (CGO_ENABLED=0): no dynamic loader, no libc start-up, less to
# map, about 1.6 ms of CPU less per plugin start here. The daemon keeps
# the platform's default, for the system's user database (NSS).
build:
	$(GO) build -o $(BIN)/taskhost ./cmd/taskhost
	CGO_ENABLED=0 $(GO) build -o $(BIN)/taskhost-confine ./cmd/taskhost-confine
	CGO_ENABLED=0 $(GO) build -o $(BIN)/taskhost-executor-legacy ./plugins/legacy/cmd/taskhost-executor-legacy
	CGO_ENABLED=0 $(GO) build -o $(BIN)/taskhost-executor-machinespirit ./plugins/machinespirit/cmd/taskhost-executor-machinespirit
	rm -f $(BIN)/taskhost-executor-testexec
	mkdir -p $(BIN)/test
	CGO_ENABLED=0 $(GO) build -o $(BIN)/test/taskhost-executor-testexec ./integration/testexec
	for b in taskhost taskhost-confine taskhost-executor-legacy taskhost-executor-machinespirit; do ln -f $(BIN)/$$b $(BIN)/test/$$b; done

# deps installs what the tests and the demo need beyond Go: SWI-Prolog.
deps:
	@command -v swipl >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends swi-prolog-nox; \
		else \
			echo "swipl not found: install SWI-Prolog 9.0.4 (Debian: sudo apt-get install swi-prolog-nox)"; exit 1; \
		fi; }

test: deps build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...
	cd examples/checklist && $(GO) vet ./... && TASKHOST_BIN=$(CURDIR)/$(BIN)/taskhost $(GO) test -count=1 ./...

demo: deps build
	$(BIN)/taskhost demo

proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	@$(PROTOC) --version | grep -qx 'libprotoc $(PROTOC_VERSION)' || \
		{ echo "protoc $(PROTOC_VERSION) required, found: $$($(PROTOC) --version)"; exit 1; }
	$(PROTOC) -I shared/proto \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--go_out=shared/proto/executorpb --go_opt=paths=source_relative \
		--go-grpc_out=shared/proto/executorpb --go-grpc_opt=paths=source_relative \
		--python_out=shared/proto/python \
		shared/proto/executor.proto
	$(PROTOC) -I shared/proto \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--go_out=shared/proto/apipb --go_opt=paths=source_relative \
		--go-grpc_out=shared/proto/apipb --go-grpc_opt=paths=source_relative \
		shared/proto/api.proto

proto-check: proto
	@git diff --exit-code -- shared/proto || \
		{ echo "generated code in shared/proto is stale: run 'make proto' and commit"; exit 1; }

$(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc:
	$(GO) build -o $(BIN)/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^shared/proto/'))" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf $(BIN)

# fuzz runs every fuzz target for FUZZTIME each (seed corpora run in `make test`).
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./host/config:FuzzParse \
	./host:FuzzOpenEnvelope \
	./host/model:FuzzScript \
	./host/tools:FuzzWorkspacePath \
	./plugins/machinespirit:FuzzDecodeFrame \
	./plugins/machinespirit:FuzzGoalChecker \
	./host/api:FuzzRequestValidation
.PHONY: fuzz
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
		GO="$(GO)" .ci/fuzz-one "$$pkg" "$$fn" "$(FUZZTIME)" || exit 1; \
	done
