package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// A file is copied off a cluster in chunks through the log of a pod that
// prints one chunk (sortie cat --offset N --length M FILE), because the
// kubelet rotates a container's log at 10 MiB and a longer log cannot be
// read whole. Each chunk is followed by a trailer line that says which
// bytes it holds and their SHA-256, so the copier refuses a chunk that a
// rotation, a broken read or anything else cut or changed:
//
//	<the chunk's bytes>\n
//	SORTIE_CHUNK offset=<N> length=<K> size=<S> sha256=<hex>\n
//
// K is the number of bytes printed, M or fewer where the file ends; S is
// the file's size when the chunk was read, so a chunk with offset+K = S is
// the last. With --sum only the trailer is printed, with SORTIE_SUM: the
// SHA-256 of the range, to check a copy already held without moving it.

// Trailer words of a chunk and of a sum.
const (
	ChunkWord = "SORTIE_CHUNK"
	SumWord   = "SORTIE_SUM"
)

// MaxChunkBytes bounds one chunk: with its trailer it stays well under the
// kubelet's default log rotation size of 10 MiB.
const MaxChunkBytes = 8 << 20

// Chunk is what a trailer says.
type Chunk struct {
	// Offset and Length are the range read; Size the file's size then.
	Offset, Length, Size int64
	// SHA256 is the hex SHA-256 of the range's bytes.
	SHA256 string
	// Sum is true for a SORTIE_SUM trailer, which no bytes precede.
	Sum bool
}

// Trailer renders the chunk's trailer line, without its newline.
func (c Chunk) Trailer() string {
	word := ChunkWord
	if c.Sum {
		word = SumWord
	}
	return fmt.Sprintf("%s offset=%d length=%d size=%d sha256=%s", word, c.Offset, c.Length, c.Size, c.SHA256)
}

// End is the offset just past the chunk.
func (c Chunk) End() int64 { return c.Offset + c.Length }

// Last says the chunk reaches the end the file had when it was read.
func (c Chunk) Last() bool { return c.End() >= c.Size }

// WriteChunk prints length bytes of f from offset (fewer where the file
// ends) and their trailer, or with sum only the trailer. A chunk is at
// most MaxChunkBytes; a sum may cover the whole file.
func WriteChunk(w io.Writer, f *os.File, offset, length int64, sum bool) (Chunk, error) {
	if offset < 0 || length < 0 || (!sum && length > MaxChunkBytes) {
		return Chunk{}, fmt.Errorf("chunk offset %d length %d: want offset >= 0 and 0 <= length <= %d", offset, length, MaxChunkBytes)
	}
	st, err := f.Stat()
	if err != nil {
		return Chunk{}, err
	}
	c := Chunk{Offset: offset, Size: st.Size(), Sum: sum}
	h := sha256.New()
	out := io.Writer(h)
	if !sum {
		out = io.MultiWriter(w, h)
	}
	// Read what was there when the chunk began: an appended file grows,
	// and the bytes past its size then belong to the next chunk.
	n, err := io.Copy(out, io.NewSectionReader(f, offset, max(0, min(length, c.Size-offset))))
	if err != nil {
		return Chunk{}, fmt.Errorf("read %s at %d: %w", f.Name(), offset+n, err)
	}
	c.Length, c.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	lead := "\n"
	if sum {
		lead = ""
	}
	if _, err := io.WriteString(w, lead+c.Trailer()+"\n"); err != nil {
		return Chunk{}, err
	}
	return c, nil
}

// ChunkError says why a printed chunk is refused.
type ChunkError struct {
	// Offset is the offset asked for.
	Offset int64
	// Reason says what is wrong, in words.
	Reason string
	// Cut is true when bytes are missing: the output ends before its
	// trailer, or holds fewer bytes than the trailer says (a log the
	// kubelet rotated loses its front). A smaller chunk may get through.
	Cut bool
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk at offset %d refused: %s", e.Offset, e.Reason)
}

// ParseChunk checks what a pod printed for the chunk asked at offset with
// at most length bytes (sum: a sum of that range) and returns the chunk's
// bytes and its trailer. It refuses, with a *ChunkError, output without a
// whole trailer, a trailer for another range or kind, a chunk shorter
// than asked that does not end the file, and bytes that are not as many
// as the trailer says or do not have its SHA-256.
func ParseChunk(out []byte, offset, length int64, sum bool) ([]byte, Chunk, error) {
	bad := func(f string, a ...any) ([]byte, Chunk, error) {
		return nil, Chunk{}, &ChunkError{Offset: offset, Reason: fmt.Sprintf(f, a...)}
	}
	cut := func(f string, a ...any) ([]byte, Chunk, error) {
		return nil, Chunk{}, &ChunkError{Offset: offset, Reason: fmt.Sprintf(f, a...), Cut: true}
	}
	if !bytes.HasSuffix(out, []byte("\n")) {
		return cut("the output (%d bytes) does not end in a trailer line: cut off", len(out))
	}
	body := out[:len(out)-1]
	i := bytes.LastIndexByte(body, '\n')
	line := string(body[i+1:])
	c, err := parseTrailer(line)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case c.Sum != sum:
		return bad("a %s trailer where a %s was asked", word(c.Sum), word(sum))
	case c.Offset != offset:
		return bad("the trailer is of offset %d", c.Offset)
	case c.Length > length:
		return bad("the trailer says %d bytes, more than the %d asked", c.Length, length)
	case c.Length < length && !c.Last():
		return bad("%d bytes of the %d asked, yet the file (%d bytes) goes on", c.Length, length, c.Size)
	}
	var data []byte
	if sum {
		if i >= 0 {
			return bad("%d bytes before a sum's trailer", i+1)
		}
	} else {
		if i < 0 {
			return bad("no newline before the trailer")
		}
		data = body[:i]
		if int64(len(data)) < c.Length {
			return cut("%d bytes before the trailer, which says %d: the log was cut (rotated?) or the read broke off", len(data), c.Length)
		}
		if int64(len(data)) != c.Length {
			return bad("%d bytes before the trailer, which says %d: the log was cut (rotated?) or the read broke off", len(data), c.Length)
		}
		if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != c.SHA256 {
			return bad("its bytes do not have the trailer's sha256 %s", c.SHA256)
		}
	}
	return data, c, nil
}

func word(sum bool) string {
	if sum {
		return SumWord
	}
	return ChunkWord
}

// parseTrailer reads a trailer line.
func parseTrailer(line string) (Chunk, error) {
	f := strings.Fields(line)
	if len(f) != 5 || (f[0] != ChunkWord && f[0] != SumWord) {
		return Chunk{}, fmt.Errorf("the last line is not a trailer (%q)", clipLine(line))
	}
	c := Chunk{Sum: f[0] == SumWord}
	for i, dst := range []*int64{&c.Offset, &c.Length, &c.Size} {
		key := []string{"offset=", "length=", "size="}[i]
		v, ok := strings.CutPrefix(f[i+1], key)
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return Chunk{}, fmt.Errorf("trailer field %q: want %s<n>", f[i+1], key)
		}
		*dst = n
	}
	v, ok := strings.CutPrefix(f[4], "sha256=")
	if _, err := hex.DecodeString(v); !ok || err != nil || len(v) != sha256.Size*2 {
		return Chunk{}, fmt.Errorf("trailer field %q: want sha256=<64 hex digits>", f[4])
	}
	c.SHA256 = v
	if c.Offset > c.Size || c.Length > c.Size-c.Offset {
		return Chunk{}, errors.New("the trailer's range is past the size it gives")
	}
	return c, nil
}

func clipLine(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
