# syntax=docker/dockerfile:1
# lockscope: one static binary on a distroless base, running as non-root.
#   docker build -t lockscope .
#   docker run --rm -p 8080:8080 -e LOCKSCOPE_REDIS_URL=redis://redis:6379/0 lockscope serve

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
# The library's modules, which go.mod replaces with these folders.
COPY event/go.mod event/go.sum event/
COPY lock/go.mod lock/go.sum lock/
COPY internal/testkit/go.mod internal/testkit/go.sum internal/testkit/
COPY extra/redsyncscope/go.mod extra/redsyncscope/go.sum extra/redsyncscope/
COPY extra/redislockscope/go.mod extra/redislockscope/go.sum extra/redislockscope/
COPY extra/lockotel/go.mod extra/lockotel/go.sum extra/lockotel/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/lockscope ./cmd/lockscope

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockscope /usr/local/bin/lockscope
USER nonroot:nonroot
# In a container the dashboard must listen beyond loopback to be published.
ENV LOCKSCOPE_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/lockscope"]
CMD ["serve"]
