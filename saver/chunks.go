package saver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/sortie-soak/sortie/record"
)

// The kubelet rotates a container's log at 10 MiB (containerLogMaxSize),
// counting the few dozen bytes it puts before every line, so a file
// larger than some megabytes cannot be copied whole through one reader
// pod's log. With this project's `sortie cat` as the reader command, the
// saver copies each file in chunks instead: one reader pod per chunk
// prints it with a trailer that gives its range and sha256 (record.
// WriteChunk), and each chunk is checked against its trailer before it is
// kept (record.ParseChunk). A chunk that is refused is asked again, at
// half the size when bytes were missing from it (a log cut by rotation):
// up to chunkTries times. The chunks are appended, synced, to
// RUNDIR/<name>.part; a copy that stops half-way (a refused chunk, the
// step's bound, the saver killed) resumes there the next time, and a
// stream or live record saved before is where the next copy starts, once
// a sum of that range on the PVC (sortie cat --sum) shows it unchanged.
// A copy of more than one chunk is checked whole the same way before it
// gets its name, so a file replaced while it was copied is never kept.

// PartSuffix ends the name of a chunked copy in progress.
const PartSuffix = ".part"

// Bounds of the chunk size: the smallest a cut chunk is halved to, and
// the default.
const (
	MinChunkBytes     = 64 << 10
	DefaultChunkBytes = 2 << 20
	chunkTries        = 3
)

// chunked says the copies go in chunks: the reader command is this
// project's cat, which prints them, and chunks are not turned off.
func (s *saver) chunked() bool {
	cmd := s.o.Env.readerCommand()
	return s.o.ChunkBytes > 0 && len(cmd) == 2 && path.Base(cmd[0]) == "sortie" && cmd[1] == "cat"
}

// copyChunked copies pvcPath in checked chunks into name, resuming a
// copy left in name.part. It returns whether the copy was kept and, if
// not, why in words; the error is only for a local write.
func (s *saver) copyChunked(ctx context.Context, pvcPath, name string, appendOnly bool, accept func(tmp string) error) (bool, string, error) {
	dest := filepath.Join(s.o.Dir, name)
	part := dest + PartSuffix
	f, off, why, err := s.resumePart(ctx, pvcPath, dest, appendOnly)
	if err != nil || why != "" {
		return false, why, err
	}
	defer f.Close()
	start, chunks := off, 0
	size := s.o.ChunkBytes
	for {
		if s.interrupt != nil && s.interrupt.Err() != nil && chunks > 0 {
			// SIGTERM: the chunk in progress was finished and kept; the
			// next save resumes after it.
			return false, fmt.Sprintf("interrupted after %d bytes, kept in %s, where the next save resumes", off, filepath.Base(part)), nil
		}
		cctx, cancel := s.ownBound(ctx)
		data, c, err := s.fetchChunk(cctx, pvcPath, off, &size)
		cancel()
		if err != nil && off == 0 && errors.Is(err, errReaderFailed) {
			// A driver image from before chunks has a sortie cat that
			// refuses --offset; so does any reader when the file is not
			// there. The whole copy is what worked before, and says why
			// it fails.
			f.Close()
			os.Remove(part)
			s.log.Warn("the reader pod refused the first chunk; copying the file whole", "file", name, "why", err)
			return s.copyWhole(ctx, pvcPath, name, accept)
		}
		if err != nil {
			return false, fmt.Sprintf("%v; %d bytes copied are kept in %s, where the next save resumes", err, off, filepath.Base(part)), nil
		}
		if _, err := f.Write(data); err != nil {
			return false, "", fmt.Errorf("write %s: %w", part, err)
		}
		if err := f.Sync(); err != nil {
			return false, "", fmt.Errorf("sync %s: %w", part, err)
		}
		off, chunks = c.End(), chunks+1
		if c.Last() {
			break
		}
	}
	s.log.Info("copied in chunks", "file", name, "bytes", off, "chunks", chunks, "resumed_at", start)
	// One chunk is one read of one open file; more, or a resumed copy,
	// could have been read across a replacement of the file.
	if chunks > 1 || off > start && start > 0 {
		cctx, cancel := s.ownBound(ctx)
		why := s.checkSum(cctx, pvcPath, part, off)
		cancel()
		if why != "" {
			f.Truncate(0)
			return false, why + "; the next save copies it again", nil
		}
	}
	if err := accept(part); err != nil {
		os.Remove(part)
		return false, fmt.Sprintf("the copy (%d bytes) is not accepted: %v", off, err), nil
	}
	if sameFile(part, dest) {
		os.Remove(part)
		return true, "", nil
	}
	if err := os.Rename(part, dest); err != nil {
		return false, "", fmt.Errorf("save %s: %w", dest, err)
	}
	return true, "", record.SyncDir(s.o.Dir)
}

// ownBound is a context with the step's bound of its own, for one reader
// pod of a chunked copy: a file of many chunks takes as long as its chunks
// take, each one bounded.
func (s *saver) ownBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.stepBound())
}

// resumePart opens dest.part for appending and says where the copy
// resumes: at its end, or for an append-only file without one, at the end
// of the copy saved before (copied into the part first), once a sum of
// that range on the PVC agrees; else at 0, the part emptied.
func (s *saver) resumePart(ctx context.Context, pvcPath, dest string, appendOnly bool) (*os.File, int64, string, error) {
	part := dest + PartSuffix
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, "", fmt.Errorf("open %s: %w", part, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, "", fmt.Errorf("%s: %w", part, err)
	}
	have := st.Size()
	if have == 0 && appendOnly {
		if have, err = copyInto(f, dest); err != nil {
			f.Close()
			return nil, 0, "", err
		}
	}
	if have == 0 {
		return f, 0, "", nil
	}
	if why := s.checkSum(ctx, pvcPath, part, have); why != "" {
		s.log.Info("not resuming the copy", "file", filepath.Base(dest), "have", have, "why", why)
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, 0, "", fmt.Errorf("empty %s: %w", part, err)
		}
		return f, 0, "", nil
	}
	s.log.Info("resuming the copy", "file", filepath.Base(dest), "at", have)
	return f, have, "", nil
}

// copyInto appends the file at src, if there is one, to f, synced.
func copyInto(f *os.File, src string) (int64, error) {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer in.Close()
	n, err := io.Copy(f, in)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return 0, fmt.Errorf("copy %s into %s: %w", src, f.Name(), err)
	}
	return n, nil
}

// fetchChunk gets the chunk at off of at most *size bytes, asking again
// when it is refused, at half the size (down to MinChunkBytes) when bytes
// were missing; a smaller size holds for the chunks after it. The error
// says what went wrong at the last try, or that the reader pod Failed
// (errReaderFailed), which is not tried again.
func (s *saver) fetchChunk(ctx context.Context, pvcPath string, off int64, size *int64) ([]byte, record.Chunk, error) {
	var why string
	for try := 1; try <= chunkTries; try++ {
		data, c, err := s.readChunk(ctx, pvcPath, off, *size, false)
		if err == nil {
			return data, c, nil
		}
		if errors.Is(err, errReaderFailed) {
			// The reader ran and refused: asking again gets the same.
			return nil, record.Chunk{}, err
		}
		why = err.Error()
		var ce *record.ChunkError
		if errors.As(err, &ce) && ce.Cut && *size > MinChunkBytes {
			*size = max(*size/2, MinChunkBytes)
		}
		s.log.Warn("chunk refused", "file", pvcPath, "offset", off, "try", try, "why", why, "next_size", *size)
	}
	return nil, record.Chunk{}, fmt.Errorf("the chunk at offset %d failed %d times, the last: %s", off, chunkTries, why)
}

// errReaderPod says a reader pod did not print its whole output, and
// errReaderFailed that it ran and Failed.
var (
	errReaderPod    = errors.New("reader pod")
	errReaderFailed = errors.New("reader pod failed")
)

// readChunk runs one reader pod for the chunk (or sum) at off of length
// bytes and checks what it printed.
func (s *saver) readChunk(ctx context.Context, pvcPath string, off, length int64, sum bool) ([]byte, record.Chunk, error) {
	args := []string{"--offset", strconv.FormatInt(off, 10), "--length", strconv.FormatInt(length, 10)}
	if sum {
		args = append(args, "--sum")
	}
	// A chunk's output is its bytes and a trailer line; more is not a
	// chunk, and is not held.
	const most = record.MaxChunkBytes + 4096
	var buf bytes.Buffer
	lw := &capWriter{w: &buf, n: most}
	if _, why, failed := s.runReader(ctx, s.readerArgs(pvcPath, args...), lw); why != "" {
		if failed {
			return nil, record.Chunk{}, fmt.Errorf("%w: %s", errReaderFailed, why)
		}
		return nil, record.Chunk{}, fmt.Errorf("%w: %s", errReaderPod, why)
	}
	if lw.over {
		return nil, record.Chunk{}, &record.ChunkError{Offset: off, Reason: fmt.Sprintf("the output is over %d bytes, more than a chunk", most)}
	}
	return record.ParseChunk(buf.Bytes(), off, length, sum)
}

// checkSum asks the PVC for the sum of the first n bytes of pvcPath and
// compares it with the local file's; why says how they differ.
func (s *saver) checkSum(ctx context.Context, pvcPath, local string, n int64) string {
	_, c, err := s.readChunk(ctx, pvcPath, 0, n, true)
	if err != nil {
		return "cannot check the copy against the file on the PVC: " + err.Error()
	}
	if c.Length != n {
		return fmt.Sprintf("the file on the PVC has %d bytes, fewer than the %d copied", c.Length, n)
	}
	f, err := os.Open(local)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, n)); err != nil {
		return err.Error()
	}
	if hex.EncodeToString(h.Sum(nil)) != c.SHA256 {
		return fmt.Sprintf("the first %d bytes of the file on the PVC are not those copied (it changed while it was copied)", n)
	}
	return ""
}

// capWriter keeps the first n bytes and notes that more came.
type capWriter struct {
	w    io.Writer
	n    int
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	keep := p
	if len(keep) > c.n {
		c.over = true
		keep = keep[:c.n]
	}
	c.n -= len(keep)
	c.w.Write(keep)
	return len(p), nil
}
