// Package httpwire reads HTTP/1.1 responses off a connection, byte by byte,
// with fixed limits and no allocation on the success path.
//
// The engine writes pre-serialised requests and needs from each response
// only its status, how to find its end, and whether the connection can be
// reused; the body is read and discarded. net/http is not used because its
// Transport re-sends a request on a reused connection that the server
// closed, which would hide exactly the resets a soak test must count.
//
// ReadResponse distinguishes four kinds of failure, which the engine
// counts differently: a *ProtocolError for bytes that are not an HTTP/1.x
// response; a *LimitError for a response larger than one of the limits
// below (it may be valid HTTP, but more than this reader accepts); io.EOF
// or io.ErrUnexpectedEOF when the peer closed the connection early; and
// any other error of the underlying reader (a reset, a deadline) returned
// as it is. Response.HeadersDone says whether the failure came before or
// after the final header block.
package httpwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Limits of a response. A response over them fails with a *LimitError; a
// line (status, header field, chunk size or trailer) longer than the
// reader's buffer does too. Bodies have no limit: they are discarded as
// they are read.
const (
	// MaxHeaderBytes bounds the bytes of all header blocks of one response,
	// interim 1xx blocks and chunked trailers included.
	MaxHeaderBytes = 64 << 10
	// MaxHeaderLines bounds the header fields of one response, likewise.
	MaxHeaderLines = 256
	// MaxInterim bounds the 1xx interim responses before the final one.
	MaxInterim = 8
)

// ProtocolError says the bytes read are not a valid HTTP/1.x response.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "malformed response: " + e.Msg }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// LimitError says a response is larger than a limit of this reader: more
// header bytes, header fields or interim responses than it accepts, or a
// line longer than its buffer. The response may be valid HTTP; the engine
// counts it apart from a malformed one.
type LimitError struct {
	// What exceeded the limit, such as "header bytes".
	What string
	// Limit is the most accepted.
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("response too large: more than %d %s", e.Limit, e.What)
}

// Response is what the engine keeps of one response. ReadResponse resets
// it before reading.
type Response struct {
	// StatusCode of the final response, 100 to 599.
	StatusCode int
	// Minor HTTP version of the final response (HTTP/1.Minor).
	Minor int
	// ContentLength from the header, or -1 when absent.
	ContentLength int64
	// Chunked says the body used the chunked transfer coding.
	Chunked bool
	// Close says the connection must not be reused: Connection: close, an
	// HTTP/1.0 response without keep-alive, a body delimited by the close,
	// or a 101 switch of protocols.
	Close bool
	// HeadersDone says the final header block was read completely; a later
	// failure happened in the body.
	HeadersDone bool
	// Interim counts the 1xx interim responses skipped before the final
	// one.
	Interim int
	// BodyBytes counts the body bytes read (chunk framing excluded).
	BodyBytes int64
}

// ReadResponse reads one response from r and discards its body. head says
// the request was HEAD, whose response has no body whatever its headers
// say. On success the connection is positioned at the next response, unless
// resp.Close is set.
func ReadResponse(r *bufio.Reader, head bool, resp *Response) error {
	*resp = Response{ContentLength: -1}
	budget := headerBudget{bytes: MaxHeaderBytes, lines: MaxHeaderLines}
	for {
		if err := readHead(r, resp, &budget); err != nil {
			return err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == 101 {
			break
		}
		// 1xx interim response: its header block was read, the final
		// response follows on the same connection.
		resp.Interim++
		if resp.Interim > MaxInterim {
			return &LimitError{What: "interim responses", Limit: MaxInterim}
		}
		keep := resp.Interim
		*resp = Response{ContentLength: -1, Interim: keep}
	}
	resp.HeadersDone = true
	if resp.StatusCode == 101 {
		// The connection now speaks another protocol; it cannot carry the
		// next request.
		resp.Close = true
		return nil
	}
	if head || resp.StatusCode == 204 || resp.StatusCode == 304 {
		return nil
	}
	switch {
	case resp.Chunked:
		return readChunked(r, resp, &budget)
	case resp.ContentLength >= 0:
		n, err := r.Discard(int(resp.ContentLength))
		resp.BodyBytes = int64(n)
		if err != nil {
			return unexpected(err)
		}
		return nil
	default:
		// No length: the body runs until the server closes.
		resp.Close = true
		for {
			n, err := r.Discard(r.Size())
			resp.BodyBytes += int64(n)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
}

type headerBudget struct {
	bytes, lines int
}

// readLine returns the next line without its line ending, its bytes
// spent from budget (nil: a chunk's framing, which is part of the body and
// not counted). The slice is valid until the next read.
func readLine(r *bufio.Reader, budget *headerBudget) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, &LimitError{What: "bytes in a line", Limit: r.Size()}
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if budget != nil {
		budget.bytes -= len(line)
		if budget.bytes < 0 {
			return nil, &LimitError{What: "header bytes", Limit: MaxHeaderBytes}
		}
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readHead reads a status line and its header block.
func readHead(r *bufio.Reader, resp *Response, budget *headerBudget) error {
	line, err := readLine(r, budget)
	if err != nil {
		if err == io.EOF && resp.Interim > 0 {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if err := parseStatus(line, resp); err != nil {
		return err
	}
	var (
		haveCL, keepAlive bool
		teSeen            bool
	)
	for {
		line, err := readLine(r, budget)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			break
		}
		budget.lines--
		if budget.lines < 0 {
			return &LimitError{What: "header fields", Limit: MaxHeaderLines}
		}
		if line[0] == ' ' || line[0] == '\t' {
			return protoErr("obsolete line folding")
		}
		colon := indexByte(line, ':')
		if colon <= 0 {
			return protoErr("header line without a name")
		}
		name := line[:colon]
		for _, c := range name {
			if !isTokenChar(c) {
				return protoErr("invalid header name %q", name)
			}
		}
		value := trimOWS(line[colon+1:])
		switch {
		case equalFold(name, "content-length"):
			n, ok := parseLength(value)
			if !ok {
				return protoErr("invalid Content-Length %q", value)
			}
			if haveCL && n != resp.ContentLength {
				return protoErr("conflicting Content-Length values")
			}
			haveCL, resp.ContentLength = true, n
		case equalFold(name, "transfer-encoding"):
			teSeen = true
			resp.Chunked = lastTokenIs(value, "chunked")
		case equalFold(name, "connection"):
			if hasToken(value, "close") {
				resp.Close = true
			}
			if hasToken(value, "keep-alive") {
				keepAlive = true
			}
		}
	}
	if teSeen {
		// Transfer-Encoding overrides Content-Length; a coding other than a
		// final chunked means the body runs until the close.
		resp.ContentLength = -1
		if !resp.Chunked {
			resp.Close = true
		}
	}
	if resp.Minor == 0 && !keepAlive {
		resp.Close = true
	}
	return nil
}

// parseStatus parses "HTTP/1.x NNN reason".
func parseStatus(line []byte, resp *Response) error {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." {
		return protoErr("invalid status line %q", clip(line))
	}
	minor := line[7]
	if minor < '0' || minor > '9' || line[8] != ' ' {
		return protoErr("invalid status line %q", clip(line))
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return protoErr("invalid status code in %q", clip(line))
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 || code > 599 {
		return protoErr("status code %d out of range", code)
	}
	if len(line) > 12 && line[12] != ' ' {
		return protoErr("invalid status line %q", clip(line))
	}
	resp.Minor = int(minor - '0')
	resp.StatusCode = code
	return nil
}

// readChunked discards a chunked body and its trailers. Chunk sizes and
// the line ends after chunks are the body's framing: a long body of small
// chunks does not spend the header budget; its trailers do.
func readChunked(r *bufio.Reader, resp *Response, budget *headerBudget) error {
	for {
		line, err := readLine(r, nil)
		if err != nil {
			return unexpected(err)
		}
		if semi := indexByte(line, ';'); semi >= 0 {
			line = line[:semi]
		}
		line = trimOWS(line)
		size, ok := parseHex(line)
		if !ok {
			return protoErr("invalid chunk size %q", clip(line))
		}
		if size == 0 {
			break
		}
		n, err := r.Discard(int(size))
		resp.BodyBytes += int64(n)
		if err != nil {
			return unexpected(err)
		}
		// The line end after the data; more data first is a malformed
		// chunk, however much of it there is.
		line, err = readLine(r, nil)
		var le *LimitError
		if errors.As(err, &le) || err == nil && len(line) != 0 {
			return protoErr("chunk data longer than its size")
		}
		if err != nil {
			return unexpected(err)
		}
	}
	// Trailer fields, then the final empty line.
	for {
		line, err := readLine(r, budget)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			return nil
		}
		budget.lines--
		if budget.lines < 0 {
			return &LimitError{What: "header fields", Limit: MaxHeaderLines}
		}
	}
}

// unexpected turns an early EOF into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares b with the lower-case ASCII s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken says whether the comma-separated list v holds token t.
func hasToken(v []byte, t string) bool {
	for len(v) > 0 {
		i := indexByte(v, ',')
		var elem []byte
		if i < 0 {
			elem, v = v, nil
		} else {
			elem, v = v[:i], v[i+1:]
		}
		if equalFold(trimOWS(elem), t) {
			return true
		}
	}
	return false
}

// lastTokenIs says whether the last element of the comma-separated list v
// is t.
func lastTokenIs(v []byte, t string) bool {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == ',' {
			v = v[i+1:]
			break
		}
	}
	return equalFold(trimOWS(v), t)
}

// parseLength parses a Content-Length: decimal digits, at most 18.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseHex parses a chunk size: hex digits, at most 15 so the size fits
// an int on every platform Go supports for servers.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
