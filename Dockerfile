# syntax=docker/dockerfile:1
# Build: docker build -t loopguard .
# Run:   docker run -p 8787:8787 -e LOOPGUARD_UPSTREAM=http://host.docker.internal:8000 loopguard
#        (or mount a config: -v $PWD/loopguard.toml:/etc/loopguard.toml -e LOOPGUARD_CONFIG=/etc/loopguard.toml)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/loopguard .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/loopguard /usr/local/bin/loopguard
COPY config.example.toml /etc/loopguard/config.example.toml
USER nonroot:nonroot
# Inside a container the proxy must listen on all interfaces to be reachable.
ENV LOOPGUARD_SERVER_LISTEN=0.0.0.0:8787
EXPOSE 8787
ENTRYPOINT ["/usr/local/bin/loopguard"]
