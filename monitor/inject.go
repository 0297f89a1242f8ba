package monitor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rnicd/rnicd/internal/units"
	"github.com/rnicd/rnicd/wire/fault"
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
	// "delay 200us", "jitter 50us", "corrupt 1%", "dropnth 1" (the first
	// packet matched from now on, once: with QPN 1 on TX, a CM's next
	// MAD), several at once ("drop 2% delay 1ms"), or "off".
	Spec string `json:"spec"`
}

// ApplySpec returns f changed as spec says; "off" clears everything, the
// QP filter included. Other impairments of f stay as they were.
//
// A bottleneck link (fault.Link, DCQCN's congestion point) is
// "link RATE [queue SIZE] [ecn KMIN KMAX P%|ecn off] [mark
// enqueue|dequeue]", rates as tc writes them (2gbit, 500mbit), sizes in
// bytes or KB/MB; a new link starts with a 256KB queue, the DCQCN
// paper's marking (ecn 5KB 200KB 1%) on the depth a packet meets (mark
// enqueue); "link off" removes it.
func ApplySpec(f fault.Faults, spec string) (fault.Faults, error) {
	words := strings.Fields(spec)
	if len(words) == 0 {
		return f, errors.New("inject: empty spec: want drop|dup|reorder|corrupt P%, delay|jitter D, link RATE [queue SIZE] [ecn KMIN KMAX P%], or off")
	}
	if len(words) == 1 && words[0] == "off" {
		return fault.Faults{}, nil
	}
	orig := f
	var queue *int
	var ecn []string
	var mark *string
	for i := 0; i < len(words); {
		what := words[i]
		n := 1 // values the impairment takes
		switch what {
		case "ecn":
			if i+1 < len(words) && words[i+1] != "off" {
				n = 3
			}
		}
		if i+n >= len(words) {
			return orig, fmt.Errorf("inject: %q: %s takes %d value(s)", spec, what, n)
		}
		vals := words[i+1 : i+1+n]
		i += 1 + n
		val := vals[0]
		switch what {
		case "drop", "dup", "duplicate", "reorder", "corrupt":
			p, err := parsePercent(val)
			if err != nil {
				return orig, fmt.Errorf("inject: %s %q: %w", what, val, err)
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
		case "dropnth":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 1<<20 {
				return orig, fmt.Errorf("inject: dropnth %q: want a packet count from 1", val)
			}
			f.DropNth = n
		case "delay", "jitter":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > time.Minute {
				return orig, fmt.Errorf("inject: %s %q: want a duration up to 1m, like 200us", what, val)
			}
			if what == "delay" {
				f.Delay = d
			} else {
				f.Jitter = d
			}
		case "link":
			if val == "off" {
				f.Link = fault.Link{}
				break
			}
			r, err := units.ParseRate(val)
			if err != nil {
				return orig, fmt.Errorf("inject: link: %w", err)
			}
			if f.Link.Rate == 0 {
				f.Link = fault.NewLink(r)
			}
			f.Link.Rate = r
		case "queue":
			q, err := parseBytes(val)
			if err != nil || q < 2048 {
				return orig, fmt.Errorf("inject: queue %q: want a size from 2KB to 1GB, like 256KB", val)
			}
			queue = &q
		case "ecn":
			ecn = vals
		case "mark":
			if val != "enqueue" && val != "dequeue" {
				return orig, fmt.Errorf("inject: mark %q: want enqueue or dequeue", val)
			}
			mark = &val
		default:
			return orig, fmt.Errorf("inject: unknown impairment %q: want drop, dropnth, dup, reorder, corrupt, delay, jitter, link, queue, ecn, mark or off", what)
		}
	}
	if (queue != nil || ecn != nil || mark != nil) && f.Link.Rate == 0 {
		return orig, errors.New("inject: queue, ecn and mark shape a link: say link RATE first")
	}
	if mark != nil {
		f.Link.Dequeue = *mark == "dequeue"
	}
	if queue != nil {
		f.Link.Queue = *queue
	}
	switch {
	case ecn == nil:
	case ecn[0] == "off":
		f.Link.KMin, f.Link.KMax, f.Link.PMax = 0, 0, 0
	default:
		kmin, err1 := parseBytes(ecn[0])
		kmax, err2 := parseBytes(ecn[1])
		p, err3 := parsePercent(ecn[2])
		if err := errors.Join(err1, err2, err3); err != nil || kmin > kmax || kmax == 0 {
			return orig, fmt.Errorf("inject: ecn %s: want KMIN <= KMAX (sizes, KMAX > 0) and a marking percentage, like ecn 5KB 200KB 1%%", strings.Join(ecn, " "))
		}
		f.Link.KMin, f.Link.KMax, f.Link.PMax = kmin, kmax, p
	}
	return f, nil
}

// parseBytes reads a size (units.ParseBytes) of at most 1 GiB.
func parseBytes(s string) (int, error) {
	v, err := units.ParseBytes(s)
	if err != nil || v > 1<<30 {
		return 0, fmt.Errorf("%q: want a size like 256KB, up to 1GB", s)
	}
	return int(v), nil
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
func Inject(fl *fault.Injector, r InjectRequest) error {
	tx, rx := r.TX, r.RX
	if !tx && !rx {
		tx, rx = true, true
	}
	apply := func(cur fault.Faults) (fault.Faults, error) {
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
	var ftx, frx fault.Faults
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
