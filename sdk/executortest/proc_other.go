//go:build !linux

package executortest

import "errors"

var errNoPlugin = errors.New("no executor process found")

var errNeedsLinux = errors.New("executortest: finding the executor process needs Linux's /proc; run the kit on Linux")

func findChild(int, string) (int, error) { return 0, errNeedsLinux }

func gone(int) bool { return true }
