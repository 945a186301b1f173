package httpwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadResponse(t *testing.T) {
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name  string
		in    string
		head  bool
		want  Response
		err   string // "" success, "proto", "limit", "eof", "unexpected"
		after string // bytes left for the next response
	}{
		{
			name: "content length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: 5, HeadersDone: true, BodyBytes: 5}, after: "NEXT",
		},
		{
			name: "no reason phrase",
			in:   "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n",
			want: Response{StatusCode: 404, Minor: 1, ContentLength: 0, HeadersDone: true},
		},
		{
			name: "bare LF line endings",
			in:   "HTTP/1.1 503 Busy\ncontent-length: 2\n\nok",
			want: Response{StatusCode: 503, Minor: 1, ContentLength: 2, HeadersDone: true, BodyBytes: 2},
		},
		{
			name: "chunked with extension and trailer",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: v\r\n\r\nNEXT",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: -1, Chunked: true, HeadersDone: true, BodyBytes: 15}, after: "NEXT",
		},
		{
			name: "chunked overrides content length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: -1, Chunked: true, HeadersDone: true, BodyBytes: 1},
		},
		{
			name: "connection close",
			in:   "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 1\r\n\r\na",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: 1, Close: true, HeadersDone: true, BodyBytes: 1},
		},
		{
			name: "close delimited",
			in:   "HTTP/1.1 200 OK\r\n\r\nuntil the end",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: -1, Close: true, HeadersDone: true, BodyBytes: 13},
		},
		{
			name: "http 1.0 closes",
			in:   "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi",
			want: Response{StatusCode: 200, Minor: 0, ContentLength: 2, Close: true, HeadersDone: true, BodyBytes: 2},
		},
		{
			name: "http 1.0 close delimited",
			in:   "HTTP/1.0 200 OK\r\n\r\nhi",
			want: Response{StatusCode: 200, Minor: 0, ContentLength: -1, Close: true, HeadersDone: true, BodyBytes: 2},
		},
		{
			name: "http 1.0 keep-alive",
			in:   "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
			want: Response{StatusCode: 200, Minor: 0, ContentLength: 2, HeadersDone: true, BodyBytes: 2},
		},
		{
			name: "interim responses",
			in:   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
			want: Response{StatusCode: 201, Minor: 1, ContentLength: 0, HeadersDone: true, Interim: 2},
		},
		{
			name: "switching protocols",
			in:   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
			want: Response{StatusCode: 101, Minor: 1, ContentLength: -1, Close: true, HeadersDone: true},
		},
		{
			name: "head ignores length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nNEXT",
			head: true,
			want: Response{StatusCode: 200, Minor: 1, ContentLength: 99, HeadersDone: true}, after: "NEXT",
		},
		{
			name: "204 has no body",
			in:   "HTTP/1.1 204 No Content\r\n\r\nNEXT",
			want: Response{StatusCode: 204, Minor: 1, ContentLength: -1, HeadersDone: true}, after: "NEXT",
		},
		{name: "closed before anything", in: "", err: "eof"},
		{name: "closed in status line", in: "HTTP/1.1 2", err: "unexpected"},
		{name: "closed in headers", in: "HTTP/1.1 200 OK\r\nContent-Le", err: "unexpected"},
		{name: "closed after interim", in: "HTTP/1.1 100 Continue\r\n\r\n", err: "unexpected"},
		{
			name: "closed in body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", err: "unexpected",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: 10, HeadersDone: true, BodyBytes: 3},
		},
		{
			name: "closed in chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", err: "unexpected",
			want: Response{StatusCode: 200, Minor: 1, ContentLength: -1, Chunked: true, HeadersDone: true, BodyBytes: 3},
		},
		{name: "garbage", in: "SSH-2.0-OpenSSH_9.6\r\n", err: "proto"},
		{name: "http 2 preface", in: "HTTP/2 200\r\n\r\n", err: "proto"},
		{name: "bad status", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: "proto"},
		{name: "status out of range", in: "HTTP/1.1 600 Odd\r\n\r\n", err: "proto"},
		{name: "status too long", in: "HTTP/1.1 2000 OK\r\n\r\n", err: "proto"},
		{name: "bad content length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "proto"},
		{name: "conflicting content length", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", err: "proto"},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", err: "proto"},
		{name: "space in header name", in: "HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", err: "proto"},
		{name: "folded header", in: "HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n", err: "proto"},
		{name: "line too long", in: "HTTP/1.1 200 OK\r\nX: " + long + "\r\n\r\n", err: "limit"},
		{name: "status line too long", in: "HTTP/1.1 200 " + long + "\r\n\r\n", err: "limit"},
		{name: "too many headers", in: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", MaxHeaderLines+1) + "\r\n", err: "limit"},
		{name: "headers too large", in: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: "+strings.Repeat("y", 1000)+"\r\n", 70) + "\r\n", err: "limit"},
		{name: "too many interim", in: strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", MaxInterim+1), err: "limit"},
		{
			name: "trailers too large", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + strings.Repeat("T: "+strings.Repeat("y", 1000)+"\r\n", 70) + "\r\n",
			err: "limit",
		},
		{
			// The body's framing is not header: far more chunk lines
			// than MaxHeaderBytes holds are read to the end.
			name: "many small chunks", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1\r\nx\r\n", 20000) + "0\r\n\r\nNEXT",
			want:  Response{StatusCode: 200, Minor: 1, ContentLength: -1, Chunked: true, HeadersDone: true, BodyBytes: 20000},
			after: "NEXT",
		},
		{name: "chunk data far longer than size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n" + long + "\r\n0\r\n\r\n", err: "proto"},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", err: "proto"},
		{name: "chunk longer than size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", err: "proto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 4096)
			var got Response
			err := ReadResponse(r, tt.head, &got)
			var pe *ProtocolError
			var le *LimitError
			switch tt.err {
			case "":
				if err != nil {
					t.Fatalf("ReadResponse() error = %v", err)
				}
			case "proto":
				if !errors.As(err, &pe) {
					t.Fatalf("ReadResponse() error = %v, want a ProtocolError", err)
				}
				return
			case "limit":
				// Not a ProtocolError: the engine counts the two apart.
				if !errors.As(err, &le) || errors.As(err, &pe) {
					t.Fatalf("ReadResponse() error = %v, want a LimitError", err)
				}
				return
			case "eof":
				if err != io.EOF {
					t.Fatalf("ReadResponse() error = %v, want io.EOF", err)
				}
				return
			case "unexpected":
				if err != io.ErrUnexpectedEOF {
					t.Fatalf("ReadResponse() error = %v, want io.ErrUnexpectedEOF", err)
				}
				if tt.want.StatusCode == 0 {
					if got.HeadersDone {
						t.Errorf("HeadersDone = true for a failure in the head")
					}
					return
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Response mismatch (-want +got):\n%s", diff)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != tt.after {
				t.Errorf("left %q for the next response, want %q", rest, tt.after)
			}
		})
	}
}

// TestReadResponseSequence reads keep-alive responses one after another.
func TestReadResponseSequence(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" +
		"HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nbad\r\n0\r\n\r\n" +
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
	r := bufio.NewReaderSize(strings.NewReader(in), 4096)
	var codes []int
	for {
		var resp Response
		err := ReadResponse(r, false, &resp)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
	}
	if diff := cmp.Diff([]int{200, 503, 404}, codes); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
}

func TestReadResponseNoAllocs(t *testing.T) {
	msg := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nDate: Mon, 30 Nov 2026 15:00:00 GMT\r\n\r\nhello world\n")
	src := bytes.NewReader(msg)
	r := bufio.NewReaderSize(src, 4096)
	var resp Response
	allocs := testing.AllocsPerRun(1000, func() {
		src.Reset(msg)
		r.Reset(src)
		if err := ReadResponse(r, false, &resp); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ReadResponse allocates %v times per response, want 0", allocs)
	}
}

func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: v\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\n",
		"garbage",
		"",
		// Over the limits of the fuzz reader's 512-byte buffer.
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("y", 600) + "\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		// A reader of a fixed buffer size: memory stays bounded whatever
		// the input, since bodies are discarded and lines never outgrow it.
		r := bufio.NewReaderSize(bytes.NewReader(data), 512)
		for i := 0; i < 4; i++ {
			var resp Response
			err := ReadResponse(r, head, &resp)
			if err != nil {
				var pe *ProtocolError
				var le *LimitError
				if !errors.As(err, &pe) && !errors.As(err, &le) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				return
			}
			if resp.StatusCode < 100 || resp.StatusCode > 599 || !resp.HeadersDone {
				t.Fatalf("success with %+v", resp)
			}
			if resp.BodyBytes > int64(len(data)) {
				t.Fatalf("read %d body bytes from %d input bytes", resp.BodyBytes, len(data))
			}
			if resp.Close {
				return
			}
		}
	})
}

func BenchmarkReadResponse(b *testing.B) {
	for _, c := range []struct{ name, msg string }{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 12\r\nDate: Mon, 30 Nov 2026 15:00:00 GMT\r\n\r\nhello world\n"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: Mon, 30 Nov 2026 15:00:00 GMT\r\n\r\n6\r\nhello \r\n6\r\nworld\n\r\n0\r\n\r\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			msg := []byte(c.msg)
			src := bytes.NewReader(msg)
			r := bufio.NewReaderSize(src, 4096)
			var resp Response
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for i := 0; i < b.N; i++ {
				src.Reset(msg)
				r.Reset(src)
				if err := ReadResponse(r, false, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
