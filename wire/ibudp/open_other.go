//go:build !linux

package ibudp

func open(Config) (Port, error) { return nil, ErrUnsupported }
