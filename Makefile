# toybox — see README.md. `make dev` runs it locally; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
BIN := $(CURDIR)/bin
CAPNPC_GO_VERSION := v3.1.0-alpha.2
STATICCHECK_VERSION := v0.8.2
GOFUMPT_VERSION := v0.12.0
GOLANGCI_LINT_VERSION := v2.15.0
# What make build needs: a C compiler for toybox-entry's launcher, and
# libseccomp found through pkg-config (libseccomp-golang's cgo asks for it).
BUILD_PACKAGES := gcc libc6-dev libseccomp-dev pkg-config
# What make dev needs to build and run (busybox-static: the README's local web
# server); make test needs the rest too (g++ and libcapnp-dev:
# tests/cppclient_test.go builds examples/cpp-client).
DEV_PACKAGES := $(BUILD_PACKAGES) bubblewrap busybox-static
# chromium: the public edge's browser tests (tests/edge_test.go).
APT_PACKAGES := $(DEV_PACKAGES) capnproto iproute2 docker.io systemd debootstrap g++ libcapnp-dev chromium
PKGS ?= $(APT_PACKAGES)
export CGO_ENABLED := 1
# How toybox-entry is built (tests/testenv.EntryBuildFlags says the same).
ENTRY_FLAGS := -tags netgo,osusergo -ldflags=-extldflags=-static

.PHONY: all deps build-deps build generate static check fmt vet vet-darwin lint test test-short test-integration test-systemd bench dev install uninstall clean tools

all: build

# deps installs what builds and tests need (Debian; PKGS, by default all of
# APT_PACKAGES). As root it runs apt-get; otherwise it prints the exact
# command and fails.
deps:
	@missing=""; \
	for p in $(PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "missing packages:$$missing"; echo "run: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; fi; \
	echo "installing:$$missing"; \
	if [ -z "$$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then apt-get update -qq; fi; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; }

# build-deps: what compiling the tree needs (BUILD_PACKAGES), installed as
# deps does, for build, vet and lint: on a machine without them the Go
# toolchain's error (pkg-config finds no libseccomp) names no package.
build-deps:
	@$(MAKE) --no-print-directory deps PKGS="$(BUILD_PACKAGES)"

# build: every command into ./bin. toybox-entry runs inside every wall:
# static (its launcher is C, so glibc linked in; netgo and osusergo keep the
# resolver and user lookups out of it), so it loads no libc there and starts
# faster.
build: build-deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	$(GO) build $(ENTRY_FLAGS) -o $(BIN)/ ./cmd/toybox-entry
	@set -e; for d in examples/*/; do if [ -f $$d/main.go ]; then $(GO) build -o $(BIN)/examples/$$(basename $$d) ./$$d; fi; done

$(TOOLS)/capnpc-go:
	GOBIN=$(TOOLS) $(GO) install capnproto.org/go/capnp/v3/capnpc-go@$(CAPNPC_GO_VERSION)

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(TOOLS)/gofumpt:
	GOBIN=$(TOOLS) $(GO) install mvdan.cc/gofumpt@$(GOFUMPT_VERSION)

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

tools: $(TOOLS)/capnpc-go $(TOOLS)/staticcheck $(TOOLS)/gofumpt $(TOOLS)/golangci-lint

generate: $(TOOLS)/capnpc-go
	$(GO) generate ./schema/...

fmt: $(TOOLS)/gofumpt
	@out=$$($(TOOLS)/gofumpt -l $$(git ls-files '*.go' | grep -v '\.capnp\.go$$')); if [ -n "$$out" ]; then echo "not gofumpt'ed:"; echo "$$out"; exit 1; fi

vet: build-deps
	$(GO) vet ./...

# vet-darwin: the tree, tests included, builds and vets on a developer's Mac
# (Linux code in _linux.go files, a stub in _other.go, Linux-only tests
# tagged linux).
vet-darwin:
	GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...

# lint: staticcheck, then golangci-lint with .golangci.yml (errorlint,
# forbidigo, govet's nilness).
lint: build-deps $(TOOLS)/staticcheck $(TOOLS)/golangci-lint
	$(TOOLS)/staticcheck ./...
	$(TOOLS)/golangci-lint run ./...

# static: formatting, vet, the linters; generate and tidy leave no diff.
static: fmt vet vet-darwin lint generate
	@git diff --exit-code -- schema || { echo "make generate changed the committed schema Go"; exit 1; }
	@cp go.mod /tmp/toybox-go.mod.$$$$ && cp go.sum /tmp/toybox-go.sum.$$$$ && $(GO) mod tidy && \
	 if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

# check: static, then every test with the race detector. CI runs it once,
# with walls required (.ci/run).
check: static
	$(MAKE) test-short

# The tests of every package (wall tests included), with the flags in $(1).
# The MCP conformance suite's output (tests/mcp_test.go; a passing test's
# lines show only with -v) goes to the log after the tests' own, each line
# marked, so none of its "N passed, N failed" lines reads as the tests' own
# summary.
CONFORMANCE_LOG := /tmp/toybox-conformance.log
define run-tests
	@rm -f $(CONFORMANCE_LOG)
	{ TOYBOX_CONFORMANCE_LOG=$(CONFORMANCE_LOG) $(GO) test $(1) -count=1 -timeout 30m ./... 2>&1; rc=$$?; \
	  if [ -f $(CONFORMANCE_LOG) ]; then sed 's/^/mcp-conformance | /' $(CONFORMANCE_LOG); fi; exit $$rc; } | tee /tmp/toybox-test.log; exit $${PIPESTATUS[0]}
endef

# test-short: every test, race detector on (what make check runs).
test-short: build
	$(call run-tests,-race)

# test: install what is missing, then run every test.
test: deps build
	$(call run-tests,)

test-integration: build
	$(GO) test -count=1 -timeout 15m ./tests/...

# dev: install what is missing (deps), build, then run the switchboard and the supervisor in the foreground
# (state in ./state, HTTP on 127.0.0.1:8787, admin on ./admin.sock). Ctrl-C
# stops both. toybox holds the switchboard's public socket; DEV_HANDLE=local
# gives it the local one instead (may reach LAN and loopback), as the README's
# offline quickstart does. With the local handle, the switchboard runs with
# --loopback unchecked (development only): it has no listener-owner facts
# (toybox's uid, its directories, docker) to judge who holds a loopback port,
# and without them it would refuse every loopback target. Each vat is at
# http://<vat>.localhost:8787/ (its own origin) and localhost:8787/<vat>/;
# DEV_PUBLIC_HOST=NAME also serves NAME and <vat>.NAME (a name of this
# machine on the LAN, say; with DEV_HTTP=0.0.0.0:8787). DEV_SERVE_FLAGS
# adds flags to toybox serve (--npm-registry URL, say; toybox serve --help).
DEV_HANDLE ?= public
DEV_HTTP ?= 127.0.0.1:8787
DEV_PUBLIC_HOST ?=
DEV_SERVE_FLAGS ?=
DEV_LOOPBACK ?= $(if $(filter local,$(DEV_HANDLE)),--loopback unchecked,)
dev:
	@$(MAKE) --no-print-directory deps PKGS="$(DEV_PACKAGES)"
	@$(MAKE) --no-print-directory build
	@mkdir -p state
	@set -u; sb=; tb=; \
	stop() { trap - INT TERM EXIT; [ -n "$$tb" ] && kill -TERM $$tb 2>/dev/null; [ -n "$$tb" ] && wait $$tb; [ -n "$$sb" ] && kill -TERM $$sb 2>/dev/null; [ -n "$$sb" ] && wait $$sb; true; }; \
	trap stop INT TERM EXIT; \
	$(BIN)/switchboard --listen public=./state/switchboard-public.sock --listen local=./state/switchboard-local.sock $(DEV_LOOPBACK) & sb=$$!; \
	for i in $$(seq 100); do [ -S ./state/switchboard-$(DEV_HANDLE).sock ] && break; sleep 0.05; done; \
	echo "vats at http://<vat>.localhost:$(lastword $(subst :, ,$(DEV_HTTP)))/ and http://localhost:$(lastword $(subst :, ,$(DEV_HTTP)))/<vat>/; admin: curl --unix-socket admin.sock http://toybox/"; \
	$(BIN)/toybox serve --state ./state --switchboard ./state/switchboard-$(DEV_HANDLE).sock --http $(DEV_HTTP) --admin ./admin.sock $(if $(DEV_PUBLIC_HOST),--public-host $(DEV_PUBLIC_HOST)) $(DEV_SERVE_FLAGS) & tb=$$!; \
	wait $$tb; tb=; stop

# bench: every figure of docs/benchmarks.md, each beside its baseline in the
# same run (medians over interleaved repeats); rewrites the table there and
# bench/results.json. About 5 minutes on 2 cores; needs bwrap (and root for
# the idle-vat and spawn figures as CI runs them). BENCHFLAGS=-quick tries it.
bench: build
	CGO_ENABLED=0 $(GO) build -o $(BIN)/benchvat ./bench/cmd/benchvat
	CGO_ENABLED=0 $(GO) build -o $(BIN)/benchmcp ./bench/cmd/benchmcp
	$(GO) build -o $(BIN)/toybench ./bench/cmd/toybench
	$(BIN)/toybench -bin $(BIN) -md docs/benchmarks.md -json bench/results.json $(BENCHFLAGS)

clean:
	rm -rf $(BIN) examples/cpp-client/build

# ---- install / uninstall (systemd units; see docs/systemd.md) ----
# make install [DESTDIR=/some/root] [PREFIX=/usr/local]
# Binaries go to $(BINDIR); units to $(UNITDIR) with their paths rewritten to
# $(BINDIR). Without DESTDIR it also creates the toybox user and group when
# missing, and runs `systemctl daemon-reload` when systemd is PID 1.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DOCDIR ?= $(PREFIX)/share/doc/toybox
UNITDIR ?= /etc/systemd/system
SYSUSERSDIR ?= /etc/sysusers.d
SYSTEMD_UNITS := switchboard.socket switchboard.service toybox.socket toybox-admin.socket toybox.service
SYSTEMD_BINS := switchboard toybox toybox-entry
# systemd_pid1 succeeds when systemd runs this machine (sd_booted and PID 1 is systemd).
systemd_pid1 = [ -d /run/systemd/system ] && [ "$$(cat /proc/1/comm 2>/dev/null)" = systemd ]

# install installs what $(BIN) holds (run `make build` first to refresh it);
# a missing binary is built.
$(addprefix $(BIN)/,$(SYSTEMD_BINS)):
	$(MAKE) build

install: $(addprefix $(BIN)/,$(SYSTEMD_BINS))
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSUSERSDIR)
	# Each binary is copied beside its place and renamed over it: what
	# opens one during an upgrade gets it whole, old or new (install(1)
	# unlinks and rewrites at the final path). A running toybox keeps the
	# toybox-entry it opened at start until it restarts.
	for b in $(SYSTEMD_BINS); do \
	  install -m 0755 $(BIN)/$$b $(DESTDIR)$(BINDIR)/.$$b.new && mv -f $(DESTDIR)$(BINDIR)/.$$b.new $(DESTDIR)$(BINDIR)/$$b || exit 1; \
	done
	for u in $(SYSTEMD_UNITS); do \
	  sed -e 's#/usr/local/bin/#$(BINDIR)/#g' -e 's#/usr/local/share/doc/toybox/#$(DOCDIR)/#g' systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u.tmp && \
	  chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.tmp && mv -f $(DESTDIR)$(UNITDIR)/$$u.tmp $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -m 0644 systemd/toybox.sysusers $(DESTDIR)$(SYSUSERSDIR)/toybox.conf
	install -m 0644 docs/systemd.md $(DESTDIR)$(DOCDIR)/systemd.md
	@if [ -z "$(DESTDIR)" ]; then \
	  getent group toybox >/dev/null || groupadd --system toybox || exit 1; \
	  getent passwd toybox >/dev/null || useradd --system --gid toybox --home-dir /var/lib/toybox --no-create-home \
	    --shell /usr/sbin/nologin --comment "toybox supervisor" toybox || exit 1; \
	  if $(systemd_pid1); then echo "systemd is PID 1: systemctl daemon-reload"; systemctl daemon-reload || exit 1; \
	  else echo "systemd is not PID 1 here: skipping systemctl daemon-reload"; fi; \
	  echo "installed; start with: systemctl enable --now switchboard.socket toybox.socket toybox-admin.socket"; \
	fi

# make uninstall: stops and removes the binaries, units and docs. Keeps the
# state (/var/lib/toybox) and the toybox user and group that own it.
uninstall:
	@if [ -z "$(DESTDIR)" ] && $(systemd_pid1); then \
	  systemctl disable --now toybox.service toybox.socket toybox-admin.socket switchboard.service switchboard.socket || true; \
	fi
	for u in $(SYSTEMD_UNITS); do rm -f $(DESTDIR)$(UNITDIR)/$$u; done
	for b in $(SYSTEMD_BINS); do rm -f $(DESTDIR)$(BINDIR)/$$b; done
	rm -f $(DESTDIR)$(SYSUSERSDIR)/toybox.conf $(DESTDIR)$(DOCDIR)/systemd.md
	rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@if [ -z "$(DESTDIR)" ] && $(systemd_pid1); then echo "systemd is PID 1: systemctl daemon-reload"; systemctl daemon-reload; fi
	@echo "uninstalled; kept /var/lib/toybox and the toybox user and group (userdel toybox to remove them)"

# test-systemd: the units under a real systemd as PID 1 in a docker container
# (a Debian root from debootstrap, imported with docker import). Slow; needs
# root, debootstrap, docker and the Debian mirror. See tests/systemd.
test-systemd: build
	@command -v debootstrap >/dev/null || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } || { echo "test-systemd needs debootstrap: apt-get install debootstrap"; exit 1; }
	$(GO) test -tags systemdcontainer -count=1 -timeout 30m -v -run 'TestUnderSystemd|TestBwrapUnderToyboxSettings' ./tests/systemd/
