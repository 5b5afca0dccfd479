# make demo   the flash sale, on a throwaway embedded etcd
# make test   install what tests need, then run every test with -race
# make check  gofmt, go vet, staticcheck
GO ?= go

.PHONY: demo test check install bench

demo:
	$(GO) run ./cmd/dlock demo seckill

install:
	./scripts/install.sh

test: install
	$(GO) vet ./...
	$(GO) test -race -timeout 25m ./...

check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...
