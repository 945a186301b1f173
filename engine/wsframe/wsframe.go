// Package wsframe encodes and decodes WebSocket frames (RFC 6455 section
// 5) and computes the handshake's accept key, for the engine's WebSocket
// echo mode (the client side: frames it writes are masked) and the
// fixture's echo (the server side: frames it reads must be masked).
//
// It is small on purpose: no extensions, no compression, a fixed bound on
// a message's size, so a hostile peer costs at most that much memory. A
// frame that breaks the RFC or the bound is a *ProtocolError; any other
// error is the underlying reader's, returned as it is (io.EOF when the peer
// closed between frames, io.ErrUnexpectedEOF within one).
package wsframe

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
)

// Opcodes of RFC 6455 section 5.2.
const (
	OpContinuation byte = 0x0
	OpText         byte = 0x1
	OpBinary       byte = 0x2
	OpClose        byte = 0x8
	OpPing         byte = 0x9
	OpPong         byte = 0xA
)

// maxControl is the largest payload of a control frame (section 5.5).
const maxControl = 125

// ProtocolError is a frame the reader refuses: it breaks RFC 6455 or the
// reader's bound.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "websocket protocol error: " + e.Reason }

func protoErr(format string, a ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, a...)}
}

// AcceptKey is the Sec-WebSocket-Accept value for a Sec-WebSocket-Key
// (section 4.2.2).
func AcceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Append appends to dst one final frame of op carrying payload, masked
// with mask when mask is not nil (a client's frames must be).
func Append(dst []byte, op byte, payload []byte, mask *[4]byte) []byte {
	dst = append(dst, 0x80|op)
	var m byte
	if mask != nil {
		m = 0x80
	}
	switch n := len(payload); {
	case n <= 125:
		dst = append(dst, m|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, m|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if mask == nil {
		return append(dst, payload...)
	}
	dst = append(dst, mask[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	for i := range payload {
		dst[start+i] ^= mask[i&3]
	}
	return dst
}

// Reader reads messages: data frames reassembled, control frames as they
// come (they may interleave a fragmented message).
type Reader struct {
	r *bufio.Reader
	// max bounds a message's payload, fragments together.
	max int
	// masked: the peer is a client, whose frames must be masked; else it
	// is a server, whose frames must not be.
	masked bool
	msg    []byte
	op     byte // of the message being reassembled; 0 when none
	ctl    [maxControl]byte
}

// NewReader reads from r messages of at most max bytes; masked says the
// peer is a client.
func NewReader(r *bufio.Reader, max int, masked bool) *Reader {
	return &Reader{r: r, max: max, masked: masked}
}

// Next returns the next message: its opcode (text, binary, close, ping or
// pong) and payload, valid until the next call.
func (r *Reader) Next() (byte, []byte, error) {
	for {
		h, err := r.header()
		if err != nil {
			return 0, nil, err
		}
		if h.op >= OpClose {
			buf := r.ctl[:h.n]
			if err := r.payload(buf, h); err != nil {
				return 0, nil, err
			}
			return h.op, buf, nil
		}
		switch {
		case h.op == OpContinuation && r.op == 0:
			return 0, nil, protoErr("continuation frame with no message begun")
		case h.op != OpContinuation && r.op != 0:
			return 0, nil, protoErr("data frame opcode %d within a fragmented message", h.op)
		case h.op != OpContinuation:
			r.op, r.msg = h.op, r.msg[:0]
		}
		if uint64(len(r.msg))+h.n > uint64(r.max) {
			return 0, nil, protoErr("message longer than %d bytes", r.max)
		}
		start := len(r.msg)
		r.msg = append(r.msg, make([]byte, h.n)...)
		if err := r.payload(r.msg[start:], h); err != nil {
			return 0, nil, err
		}
		if h.fin {
			op := r.op
			r.op = 0
			return op, r.msg, nil
		}
	}
}

type header struct {
	fin  bool
	op   byte
	n    uint64
	mask [4]byte
}

// header reads and checks a frame's header.
func (r *Reader) header() (header, error) {
	var h header
	var b [8]byte
	if _, err := io.ReadFull(r.r, b[:2]); err != nil {
		return h, err
	}
	h.fin, h.op = b[0]&0x80 != 0, b[0]&0x0F
	if b[0]&0x70 != 0 {
		return h, protoErr("reserved bits set (no extension was agreed)")
	}
	switch h.op {
	case OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong:
	default:
		return h, protoErr("reserved opcode %d", h.op)
	}
	if masked := b[1]&0x80 != 0; masked != r.masked {
		return h, protoErr("frame masked %v; a client must mask, a server must not", masked)
	}
	h.n = uint64(b[1] & 0x7F)
	switch h.n {
	case 126:
		if _, err := io.ReadFull(r.r, b[:2]); err != nil {
			return h, unexpected(err)
		}
		h.n = uint64(binary.BigEndian.Uint16(b[:2]))
	case 127:
		if _, err := io.ReadFull(r.r, b[:]); err != nil {
			return h, unexpected(err)
		}
		h.n = binary.BigEndian.Uint64(b[:])
	}
	if h.op >= OpClose && (!h.fin || h.n > maxControl) {
		return h, protoErr("control frame fragmented or longer than %d bytes", maxControl)
	}
	if h.n > uint64(r.max) {
		return h, protoErr("frame of %d bytes, more than %d", h.n, r.max)
	}
	if r.masked {
		if _, err := io.ReadFull(r.r, h.mask[:]); err != nil {
			return h, unexpected(err)
		}
	}
	return h, nil
}

// payload reads a frame's payload into buf, unmasked.
func (r *Reader) payload(buf []byte, h header) error {
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return unexpected(err)
	}
	if r.masked {
		for i := range buf {
			buf[i] ^= h.mask[i&3]
		}
	}
	return nil
}

// unexpected is err within a frame: io.EOF there is io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
