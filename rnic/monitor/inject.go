package monitor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rnicd/rnicd/wire/ibudp"
)

// InjectRequest asks for impairments on a device's port (`rnic inject`).
type InjectRequest struct {
	Device string `json:"device"`
	TX     bool   `json:"tx"` // neither TX nor RX: both
	RX     bool   `json:"rx"`
	// QPN, if set, limits the impairments to packets for that QP (the
	// BTH destination QP: the peer's QPN on TX, ours on RX).
	QPN *uint32 `json:"qpn,omitempty"`
	// Spec is what to do: "drop 2%", "dup 1%", "reorder 5%",
	// "delay 200us", "jitter 50us", "corrupt 1%", several at once
	// ("drop 2% delay 1ms"), or "off".
	Spec string `json:"spec"`
}

// ApplySpec returns f changed as spec says; "off" clears everything, the
// QP filter included. Other impairments of f stay as they were.
func ApplySpec(f ibudp.Faults, spec string) (ibudp.Faults, error) {
	words := strings.Fields(spec)
	if len(words) == 0 {
		return f, errors.New("inject: empty spec: want drop|dup|reorder|corrupt P%, delay|jitter D, or off")
	}
	if len(words) == 1 && words[0] == "off" {
		return ibudp.Faults{}, nil
	}
	if len(words)%2 != 0 {
		return f, fmt.Errorf("inject: %q: each impairment takes one value", spec)
	}
	for i := 0; i < len(words); i += 2 {
		what, val := words[i], words[i+1]
		switch what {
		case "drop", "dup", "duplicate", "reorder", "corrupt":
			p, err := parsePercent(val)
			if err != nil {
				return f, fmt.Errorf("inject: %s %q: %w", what, val, err)
			}
			switch what {
			case "drop":
				f.Drop = p
			case "dup", "duplicate":
				f.Duplicate = p
			case "reorder":
				f.Reorder = p
			case "corrupt":
				f.Corrupt = p
			}
		case "delay", "jitter":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > time.Minute {
				return f, fmt.Errorf("inject: %s %q: want a duration up to 1m, like 200us", what, val)
			}
			if what == "delay" {
				f.Delay = d
			} else {
				f.Jitter = d
			}
		default:
			return f, fmt.Errorf("inject: unknown impairment %q: want drop, dup, reorder, corrupt, delay, jitter or off", what)
		}
	}
	return f, nil
}

func parsePercent(s string) (float64, error) {
	num, ok := strings.CutSuffix(s, "%")
	if !ok {
		return 0, errors.New("want a percentage, like 2%")
	}
	p, err := strconv.ParseFloat(num, 64)
	if err != nil || p < 0 || p > 100 || p != p {
		return 0, errors.New("want a percentage from 0% to 100%")
	}
	return p / 100, nil
}

// Inject applies r to fl, the injector in front of a device's port.
func Inject(fl *ibudp.Faulty, r InjectRequest) error {
	tx, rx := r.TX, r.RX
	if !tx && !rx {
		tx, rx = true, true
	}
	apply := func(cur ibudp.Faults) (ibudp.Faults, error) {
		f, err := ApplySpec(cur, r.Spec)
		if err != nil {
			return cur, err
		}
		if r.QPN != nil && strings.TrimSpace(r.Spec) != "off" {
			if *r.QPN > 0xffffff {
				return cur, fmt.Errorf("inject: QPN %#x has more than 24 bits", *r.QPN)
			}
			f.FilterQPN, f.QPN = true, *r.QPN
		}
		return f, nil
	}
	var ftx, frx ibudp.Faults
	var err error
	if tx {
		if ftx, err = apply(fl.TX()); err != nil {
			return err
		}
	}
	if rx {
		if frx, err = apply(fl.RX()); err != nil {
			return err
		}
	}
	if tx {
		fl.SetTX(ftx)
	}
	if rx {
		fl.SetRX(frx)
	}
	return nil
}
