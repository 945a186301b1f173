module github.com/sortie-soak/sortie/tools

go 1.26.0

tool (
	github.com/bazelbuild/bazel-gazelle/cmd/gazelle
	github.com/bazelbuild/buildtools/buildifier
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	github.com/bazel-contrib/bazel-gazelle/v2 v2.0.0-3 // indirect
	github.com/bazelbuild/bazel-gazelle v0.53.0 // indirect
	github.com/bazelbuild/buildtools v0.0.0-20260904073137-eaa4d125b423 // indirect
	github.com/bmatcuk/doublestar/v4 v4.9.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/safeopen v0.0.0-20260327150837-43626d6f4685 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/mod v0.23.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/tools/go/vcs v0.1.0-deprecated // indirect
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
