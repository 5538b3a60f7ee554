# The two commands of the README: `make demo` and `make test`; `make install` puts the pronto command
# into $(go env GOPATH)/bin.
.PHONY: demo test install lint bench

demo:
	go run ./cmd/pronto demo

test:
	./scripts/test

install:
	go install ./cmd/pronto

lint:
	gofmt -l . | (! grep .) || (echo "gofmt would change the files above" && exit 1)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

bench:
	cd bench && go run . --out out
