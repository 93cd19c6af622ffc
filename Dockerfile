# Multi-stage build: a static binary on a small, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/processor ./cmd/processor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/processor /processor
COPY configs/processor.yaml /etc/processor/processor.yaml
USER nonroot:nonroot
VOLUME ["/var/lib/processor"]
ENV PROCESSOR_STATE_DIR=/var/lib/processor
EXPOSE 9100
ENTRYPOINT ["/processor"]
CMD ["run", "--config", "/etc/processor/processor.yaml"]
