package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Error is one problem of a plan, at the place it was written.
type Error struct {
	// File is the plan's file name as given to Parse.
	File string
	// Line and Col are 1-based.
	Line, Col int
	// Msg says what is wrong, starting with the field's path or the
	// scenario it concerns.
	Msg string
}

// Error formats the problem as file:line:col: msg, the form editors jump to.
func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// loc is where a value was written and the path that names it in messages.
type loc struct {
	line, col int
	path      string // such as scenarios[0].executor.rate
}

// errList gathers every problem of a plan so that all are reported at once.
type errList struct {
	file string
	errs []*Error
}

func (l *errList) add(at loc, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if at.path != "" {
		msg = at.path + ": " + msg
	}
	l.addMsg(at, msg)
}

// addMsg records msg as it is, without the path.
func (l *errList) addMsg(at loc, msg string) {
	line, col := max(at.line, 1), max(at.col, 1)
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Col: col, Msg: msg})
}

// err returns every problem, sorted by position and without repeats (a value
// inherited from defaults can break the same rule in several scenarios), as
// one error; nil when there is none.
func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	es := slices.Clone(l.errs)
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), cmp.Compare(a.Msg, b.Msg))
	})
	es = slices.CompactFunc(es, func(a, b *Error) bool { return *a == *b })
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return errors.Join(out...)
}
