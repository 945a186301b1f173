//go:build !linux

package bench

import (
	"context"
	"errors"
	"time"
)

func runFloorLoop(context.Context, string, string, int, time.Duration, time.Duration, int) (floorReport, error) {
	return floorReport{}, errors.New("floor: Linux only")
}
