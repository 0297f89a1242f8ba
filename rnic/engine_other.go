//go:build !linux

package rnic

import "runtime"

func osYield() { runtime.Gosched() }
