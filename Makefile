# make demo   the flash sale, on a throwaway embedded etcd
# make test   install what tests need, then run every test with -race
# make check  gofmt, go vet, staticcheck
# make verify every backend x fault combination in the short profile, and its table
GO ?= go

.PHONY: demo test check install bench verify

demo:
	$(GO) run ./cmd/dlock demo seckill

install:
	./scripts/install.sh

test: install
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m ./...

check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

VERIFY_OUT ?= $(CURDIR)/verify-out
verify: install
	rm -rf $(VERIFY_OUT)
	DLOCK_VERIFY_OUT=$(VERIFY_OUT) $(GO) test -count=1 -timeout 20m -run '^TestVerifyShortProfile$$' ./verify/ || { cat $(VERIFY_OUT)/summary.txt 2>/dev/null; exit 1; }
	@cat $(VERIFY_OUT)/summary.txt
