# agentbox: the two commands a newcomer needs are `make demo` and `make test`;
# both run .ci/setup first, which installs whatever is missing.
SHELL := bash
GO ?= go
IMAGE ?= agentbox/sandbox-claude:latest
GOLANGCI_LINT_VERSION := v2.15.0
# Packages whose tests start many containers; run with limited parallelism on
# small machines.
TEST_FLAGS ?= -race -count=1 -timeout 45m
CLAUDE_BIN ?=
# The CLI pins: CLAUDE_CODE_VERSION_PINNED and CLAUDE_CODE_VERSION_PREVIOUS.
include examples/images/VERSIONS
# The sandbox image with the previous pin, for test-claude-previous.
PREVIOUS_IMAGE ?= agentbox/sandbox-claude:$(CLAUDE_CODE_VERSION_PREVIOUS)
# The codex runner's images (CODEX_VERSION_PINNED and CODEX_VERSION_PREVIOUS).
CODEX_IMAGE ?= agentbox/sandbox-codex:latest
CODEX_PREVIOUS_IMAGE ?= agentbox/sandbox-codex:$(CODEX_VERSION_PREVIOUS)
CODEX_VENDOR ?=

.PHONY: all setup helper image image-previous image-codex image-codex-previous test test-claude-previous test-codex-previous test-runsc test-k8s vet lint fuzz demo clean k8s-up k8s-down

all: vet test

## setup: install Docker, busybox-static and the pinned Claude Code CLI when missing; build helper and image
setup:
	@.ci/setup

## helper: the static in-container helper (linux/amd64, no cgo)
helper:
	@mkdir -p bin
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags='-s -w' -o bin/agentbox-helper ./executor/helper/cmd/agentbox-helper

## image: the offline sandbox image with the helper baked in (rebuilt only when its inputs change)
image: helper
	@inputs=$$(cat bin/agentbox-helper examples/images/build-offline.sh examples/images/VERSIONS | sha256sum | cut -c1-16); \
	if [ "$$(docker image inspect -f '{{index .Config.Labels "io.agentbox.image.inputs"}}' $(IMAGE) 2>/dev/null)" = "$$inputs" ]; then \
		echo "image: $(IMAGE) is up to date ($$inputs)"; \
	else \
		HELPER=bin/agentbox-helper CLAUDE_BIN="$(CLAUDE_BIN)" IMAGE_INPUTS=$$inputs examples/images/build-offline.sh $(IMAGE); \
	fi

## image-previous: the sandbox image with the previous CLI pin (VERSIONS), CLI from the npm registry
image-previous: helper
	@inputs=$$( (cat bin/agentbox-helper examples/images/build-offline.sh; echo $(CLAUDE_CODE_VERSION_PREVIOUS)) | sha256sum | cut -c1-16); \
	if [ "$$(docker image inspect -f '{{index .Config.Labels "io.agentbox.image.inputs"}}' $(PREVIOUS_IMAGE) 2>/dev/null)" = "$$inputs" ]; then \
		echo "image-previous: $(PREVIOUS_IMAGE) is up to date ($$inputs)"; \
	else \
		HELPER=bin/agentbox-helper CLAUDE_CODE_VERSION=$(CLAUDE_CODE_VERSION_PREVIOUS) IMAGE_INPUTS=$$inputs examples/images/build-offline.sh $(PREVIOUS_IMAGE); \
	fi

## image-codex: the codex runner's offline sandbox image (AGENT=codex), the CLI's platform package from the npm registry or CODEX_VENDOR
image-codex: helper
	@inputs=$$( (cat bin/agentbox-helper examples/images/build-offline.sh examples/images/VERSIONS; echo codex) | sha256sum | cut -c1-16); \
	if [ "$$(docker image inspect -f '{{index .Config.Labels "io.agentbox.image.inputs"}}' $(CODEX_IMAGE) 2>/dev/null)" = "$$inputs" ]; then \
		echo "image-codex: $(CODEX_IMAGE) is up to date ($$inputs)"; \
	else \
		AGENT=codex HELPER=bin/agentbox-helper CODEX_VENDOR="$(CODEX_VENDOR)" IMAGE_INPUTS=$$inputs examples/images/build-offline.sh $(CODEX_IMAGE); \
	fi

## image-codex-previous: the codex image with the previous CLI pin (VERSIONS), CLI from the npm registry
image-codex-previous: helper
	@inputs=$$( (cat bin/agentbox-helper examples/images/build-offline.sh; echo codex $(CODEX_VERSION_PREVIOUS)) | sha256sum | cut -c1-16); \
	if [ "$$(docker image inspect -f '{{index .Config.Labels "io.agentbox.image.inputs"}}' $(CODEX_PREVIOUS_IMAGE) 2>/dev/null)" = "$$inputs" ]; then \
		echo "image-codex-previous: $(CODEX_PREVIOUS_IMAGE) is up to date ($$inputs)"; \
	else \
		AGENT=codex HELPER=bin/agentbox-helper CODEX_VERSION=$(CODEX_VERSION_PREVIOUS) IMAGE_INPUTS=$$inputs examples/images/build-offline.sh $(CODEX_PREVIOUS_IMAGE); \
	fi

## test-codex-previous: the codex package's tests (runner conformance, e2e) against the previous CLI pin
test-codex-previous: image-codex-previous
	AGENTBOX_TEST_CODEX_IMAGE=$(CODEX_PREVIOUS_IMAGE) $(GO) test $(TEST_FLAGS) ./codex

## test-claude-previous: the claude package's tests (runner conformance, e2e) against the previous CLI pin
test-claude-previous: image-previous
	AGENTBOX_TEST_IMAGE=$(PREVIOUS_IMAGE) $(GO) test $(TEST_FLAGS) ./claude

## test-runsc: the end-to-end tests again on gVisor: builds the pinned runsc and registers it with dockerd (AGENTBOX_RUNSC=1 .ci/setup), then the claude and codex packages' e2e suites and the executor's and attacks' runsc tests
test-runsc:
	@AGENTBOX_RUNSC=1 .ci/setup
	AGENTBOX_RUNSC=1 AGENTBOX_TEST_RUNTIME=runsc $(GO) test $(TEST_FLAGS) -run '^TestE2E$$' ./claude ./codex
	AGENTBOX_RUNSC=1 $(GO) test $(TEST_FLAGS) -run 'Runsc|TestAttackReadHostPathsFromMounts/runsc' ./executor/docker ./internal/testkit/hostile

## vet: go vet over every package
vet:
	$(GO) vet ./...

## test: set up what is missing, then vet and run every test with the race detector
test: setup vet
	$(GO) test $(TEST_FLAGS) ./...

## fuzz: the differential fuzz targets of the one reading of a request body, the Responses translations' and the codex parser's (FUZZTIME each); their corpora also run in make test
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzOneReading$$' -fuzztime $(FUZZTIME) ./middleware/openai
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) ./internal/strictjson
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./services/modelproxy/openairesponses
	$(GO) test -run '^$$' -fuzz '^FuzzChatStream$$' -fuzztime $(FUZZTIME) ./services/modelproxy/openairesponses
	$(GO) test -run '^$$' -fuzz '^FuzzMessagesStream$$' -fuzztime $(FUZZTIME) ./services/modelproxy/openairesponses
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./codex
	$(GO) test -run '^$$' -fuzz '^FuzzTranslateStream$$' -fuzztime $(FUZZTIME) ./services/modelproxy/anthropicopenai

## lint: golangci-lint (pinned) with the layering rules of .golangci.yml
lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

## demo: set up, start the example gateway offline, send one sandboxed chat request, print the answer and the file
demo: setup
	$(GO) run ./examples/gateway -demo

clean:
	rm -rf bin

## k8s-up: build (cached in /var/cache/agentbox-k8s, under nice unless K8S_NICE= is set) and start the offline single-node test cluster (root)
k8s-up: image image-codex
	internal/testkit/k8s/build.sh
	internal/testkit/k8s/up.sh

## test-k8s: the Kubernetes backend's tests on a real offline cluster: build (cached), bring-up, the cluster tests with AGENTBOX_K8S=1, teardown (always) with the host checked against its baseline
test-k8s: image image-codex
	internal/testkit/k8s/test.sh

## k8s-down: tear the test cluster down and check the host is as before
k8s-down:
	internal/testkit/k8s/down.sh
