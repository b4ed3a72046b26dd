# toybox — see README.md. `make dev` runs it locally; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
BIN := $(CURDIR)/bin
CAPNPC_GO_VERSION := v3.1.0-alpha.2
STATICCHECK_VERSION := v0.8.2
GOFUMPT_VERSION := v0.12.0
APT_PACKAGES := bubblewrap libseccomp-dev capnproto busybox-static iproute2 docker.io
export CGO_ENABLED := 1

.PHONY: all deps build generate check fmt vet lint test test-short test-integration test-systemd bench dev install uninstall clean tools

all: build

# deps installs what builds and tests need (Debian). As root it runs apt-get;
# otherwise it prints the exact command and fails.
deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "missing packages:$$missing"; echo "run: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; fi; \
	echo "installing:$$missing"; \
	if [ -z "$$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then apt-get update -qq; fi; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	@for d in examples/*/; do [ -f $$d/main.go ] && $(GO) build -o $(BIN)/examples/$$(basename $$d) ./$$d || true; done

$(TOOLS)/capnpc-go:
	GOBIN=$(TOOLS) $(GO) install capnproto.org/go/capnp/v3/capnpc-go@$(CAPNPC_GO_VERSION)

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(TOOLS)/gofumpt:
	GOBIN=$(TOOLS) $(GO) install mvdan.cc/gofumpt@$(GOFUMPT_VERSION)

tools: $(TOOLS)/capnpc-go $(TOOLS)/staticcheck $(TOOLS)/gofumpt

generate: $(TOOLS)/capnpc-go
	$(GO) generate ./schema/...

fmt: $(TOOLS)/gofumpt
	@out=$$($(TOOLS)/gofumpt -l $$(git ls-files '*.go' | grep -v '\.capnp\.go$$')); if [ -n "$$out" ]; then echo "not gofumpt'ed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: $(TOOLS)/staticcheck
	$(TOOLS)/staticcheck ./...

# check: formatting, vet, staticcheck, generate and tidy leave no diff, then the tests.
check: fmt vet lint generate
	@git diff --exit-code -- schema || { echo "make generate changed the committed schema Go"; exit 1; }
	@cp go.mod /tmp/toybox-go.mod.$$$$ && cp go.sum /tmp/toybox-go.sum.$$$$ && $(GO) mod tidy && \
	 if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; echo "go mod tidy changes go.mod/go.sum"; exit 1; fi
	$(MAKE) test-short

# test-short: every package's tests (wall tests included), race detector on.
test-short: build
	$(GO) test -race -count=1 ./...

# test: install what is missing, then run every test.
test: deps build
	$(GO) test -count=1 -timeout 20m ./... 2>&1 | tee /tmp/toybox-test.log; exit $${PIPESTATUS[0]}

test-integration: build
	$(GO) test -count=1 -timeout 15m ./tests/...

dev:
	@echo "make dev: not built yet (the supervisor issue fills it in)"; exit 1

bench:
	@echo "make bench: not built yet (the benchmark issue fills it in)"; exit 1

clean:
	rm -rf $(BIN)
