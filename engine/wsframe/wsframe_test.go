package wsframe

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestAcceptKey(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got := AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("AcceptKey = %q", got)
	}
}

func read(b []byte, max int, masked bool) (byte, []byte, error) {
	return NewReader(bufio.NewReader(bytes.NewReader(b)), max, masked).Next()
}

func TestRoundTrip(t *testing.T) {
	mask := &[4]byte{1, 2, 3, 4}
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 70000} {
		p := bytes.Repeat([]byte{'x'}, n)
		for _, m := range []*[4]byte{nil, mask} {
			op, got, err := read(Append(nil, OpBinary, p, m), 1<<20, m != nil)
			if err != nil || op != OpBinary || !bytes.Equal(got, p) {
				t.Fatalf("n=%d masked=%v: op %d, %d bytes, %v", n, m != nil, op, len(got), err)
			}
		}
	}
}

func TestRFCExamples(t *testing.T) {
	// Section 5.7: an unmasked and a masked "Hello", and a fragmented one.
	for _, c := range []struct {
		in     []byte
		masked bool
	}{
		{[]byte{0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f}, false},
		{[]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}, true},
		{[]byte{0x01, 0x03, 0x48, 0x65, 0x6c, 0x89, 0x00, 0x80, 0x02, 0x6c, 0x6f}, false},
	} {
		r := NewReader(bufio.NewReader(bytes.NewReader(c.in)), 100, c.masked)
		op, p, err := r.Next()
		if op == OpPing { // the interleaved ping of the fragmented message
			op, p, err = r.Next()
		}
		if err != nil || op != OpText || string(p) != "Hello" {
			t.Fatalf("% x: op %d %q %v", c.in, op, p, err)
		}
	}
}

func TestRefused(t *testing.T) {
	for name, in := range map[string][]byte{
		"rsv":               {0xC1, 0x00},
		"reserved opcode":   {0x83, 0x00},
		"unmasked client":   {0x81, 0x00},
		"long control":      {0x89, 0x80 | 126, 0x00, 0x7E, 0, 0, 0, 0},
		"fragmented ping":   {0x09, 0x80, 0, 0, 0, 0},
		"lone continuation": {0x80, 0x80, 0, 0, 0, 0},
		"too long":          {0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0},
		"nested message":    {0x01, 0x80, 0, 0, 0, 0, 0x01, 0x80, 0, 0, 0, 0},
	} {
		_, _, err := read(in, 100, true)
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %v, want a *ProtocolError", name, err)
		}
	}
	if _, _, err := read([]byte{0x82, 0x80 | 5, 1, 2}, 100, true); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := read(nil, 100, true); err != io.EOF {
		t.Errorf("nothing: %v, want io.EOF", err)
	}
	_, _, err := read(Append(nil, OpText, []byte(strings.Repeat("y", 101)), nil), 100, false)
	if err == nil || !strings.Contains(err.Error(), "more than 100") {
		t.Errorf("frame over the bound: %v", err)
	}
}

// FuzzReader: any bytes give messages within the bound or an error, never
// a panic or an allocation past the bound.
func FuzzReader(f *testing.F) {
	f.Add(Append(nil, OpText, []byte("hello"), &[4]byte{9, 8, 7, 6}), true)
	f.Add(Append(nil, OpBinary, bytes.Repeat([]byte{1}, 300), nil), false)
	f.Add([]byte{0x01, 0x03, 0x48, 0x65, 0x6c, 0x89, 0x00, 0x80, 0x02, 0x6c, 0x6f}, false)
	f.Add([]byte{0x82, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, true)
	f.Fuzz(func(t *testing.T, in []byte, masked bool) {
		r := NewReader(bufio.NewReader(bytes.NewReader(in)), 512, masked)
		for range 64 {
			op, p, err := r.Next()
			if err != nil {
				return
			}
			if len(p) > 512 || (op >= OpClose && len(p) > maxControl) {
				t.Fatalf("op %d payload of %d bytes", op, len(p))
			}
		}
	})
}
