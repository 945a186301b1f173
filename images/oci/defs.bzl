"""sortie_image: one sortie image with rules_oci, for teams that build with Bazel.

The image has the content `sortie-images build` gives it: the binary as a
static linux/amd64 executable at /usr/local/bin/<name>, the CA bundle (the
pinned Mozilla roots, or ca_certs),
passwd and group with the non-root user 65532 (the layer tar is written by
`sortie-images layer`, the same code as the Go builder), entrypoint the
binary, user 65532:65532, working directory /. Its digest is not the one
images.lock pins: rules_oci compresses and writes the config itself, and
rules_go links with its own flags. images.lock pins the Go-built images.

Written, not run: CI builds with the go command only.
"""

load("@rules_go//go:def.bzl", "go_cross_binary")
load("@rules_oci//oci:defs.bzl", "oci_image")

def sortie_image(name, binary, ca_certs = None, visibility = None):
    """One sortie image: :<name> (oci_image) and its layer :<name>_layer.

    Args:
      name: the image and binary name, e.g. "sortie-engine".
      binary: the go_binary target of the image's main package.
      ca_certs: a PEM CA bundle file to install at
        /etc/ssl/certs/ca-certificates.crt instead of the pinned Mozilla
        roots (a private CA's).
      visibility: visibility of the image target.
    """
    go_cross_binary(
        name = name + "_linux_amd64",
        # The pure (cgo-off) platform: a static executable.
        platform = "@rules_go//go/toolchain:linux_amd64",
        target = binary,
    )
    srcs = [":" + name + "_linux_amd64"]
    flags = [
        "$(execpath //images/cmd/sortie-images) layer",
        "--name " + name,
        "--binary $(execpath :" + name + "_linux_amd64)",
    ]
    if ca_certs:
        srcs.append(ca_certs)
        flags.append("--ca-certs $(execpath " + ca_certs + ")")
    native.genrule(
        name = name + "_layer",
        srcs = srcs,
        outs = [name + "_layer.tar"],
        cmd = " ".join(flags + ["--out $@ >/dev/null"]),
        tools = ["//images/cmd/sortie-images"],
    )
    oci_image(
        name = name,
        architecture = "amd64",
        entrypoint = ["/usr/local/bin/" + name],
        env = {
            "PATH": "/usr/local/bin",
            "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        },
        labels = {
            "org.opencontainers.image.source": "https://github.com/sortie-soak/sortie",
            "org.opencontainers.image.title": name,
        },
        os = "linux",
        tars = [":" + name + "_layer"],
        user = "65532:65532",
        visibility = visibility,
        workdir = "/",
    )
