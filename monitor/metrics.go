package monitor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/wire/fault"
)

// collector reads the devices' counters at every scrape. Metric names:
//
//	rnicd_build_info{version,revision,goversion}  1
//	rnicd_<counter>_total{device}        every device counter, rxe's names (sent_pkts, rcvd_seq_err, ...) and each drop reason,
//	                                     mlx5's for DCQCN (np_cnp_sent, ...), Linux's for the CM agent's (cm_tx_msgs_req, ...)
//	rnicd_port_<counter>_total{device}   the port's counters (icrc_err, rx_kernel_drops, ...)
//	rnicd_fault_<what>_total{device,dir} what the fault injector did (dropped, duplicated, ...)
//	rnicd_doorbell_depth{device}         QPs waiting for the send pipeline
//	rnicd_qps{device,type,state}         how many QPs of each type are in each state
//
// and, with Config.QPMetrics, one set of series per QP (their number grows
// with the QPs, 1,024 and more on a busy daemon, so they are asked for):
//
//	rnicd_qp_info{device,qpn,type,state}  1
//	rnicd_qp_<field>{device,qpn,type}     sq_used, sq_inflight, rq_used; cc_rate_bps, cc_target_rate_bps, cc_alpha_ratio
//
// PSNs are no series: a number that wraps at 2^24 and only identifies a
// packet is neither a gauge nor a counter, and as a label it would make a
// new series at every packet (rnic stat and /api/state show them).
//
// The names of the counters come from the devices, so the collector is
// unchecked (it describes nothing up front); each family's HELP comes
// from metrics_help.go.
type collector struct{ m *Monitor }

func (collector) Describe(chan<- *prometheus.Desc) {}

// help is the HELP text of family name from table, or a plain one for a
// counter nobody described yet (TestMetricsHelp fails on it).
func help(table map[string]string, name, what string) string {
	if h, ok := table[name]; ok {
		return h
	}
	if h, ok := cmMsgHelp(name); ok && what == "Device" {
		return h
	}
	return what + " counter " + name + " (undescribed)."
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(name, help string, t prometheus.ValueType, v float64, labels prometheus.Labels) {
		d := prometheus.NewDesc(name, help, nil, labels)
		ch <- prometheus.MustNewConstMetric(d, t, v)
	}
	bi := buildinfo.Read()
	emit("rnicd_build_info", "Always 1: the version, VCS revision and Go version rnicd was built from, as labels.", prometheus.GaugeValue, 1,
		prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion})
	for _, dv := range c.m.cfg.Devices {
		d := dv.view()
		dev := prometheus.Labels{"device": d.Dev.Name()}
		for name, v := range d.counters() {
			emit("rnicd_"+name+"_total", help(counterHelp, name, "Device"), prometheus.CounterValue, float64(v), dev)
		}
		d.Dev.Observer().PortStats().Each(func(name string, v uint64) {
			emit("rnicd_port_"+name+"_total", help(portHelp, name, "Port"), prometheus.CounterValue, float64(v), dev)
		})
		if d.Faulty != nil {
			fs := d.faultStats()
			for dir, fc := range map[string]fault.Counts{"tx": fs.TX, "rx": fs.RX} {
				l := prometheus.Labels{"device": d.Dev.Name(), "dir": dir}
				for name, v := range map[string]uint64{"packets": fc.Packets, "matched": fc.Matched, "dropped": fc.Dropped,
					"duplicated": fc.Duplicated, "corrupted": fc.Corrupted, "reordered": fc.Reordered,
					"delayed": fc.Delayed, "overflow": fc.Overflow,
					"link_queued": fc.LinkPackets, "link_dropped": fc.LinkDropped, "link_marked": fc.Marked} {
					emit("rnicd_fault_"+name+"_total", help(faultHelp, name, "Fault injector"), prometheus.CounterValue, float64(v), l)
				}
				emit("rnicd_fault_link_queue_bytes", "Bytes in the injected bottleneck link's queue now.", prometheus.GaugeValue, float64(fc.QueueDepth), l)
				emit("rnicd_fault_link_queue_peak_bytes", "The most bytes the injected bottleneck link's queue held.", prometheus.GaugeValue, float64(fc.QueuePeak), l)
			}
		}
		emit("rnicd_doorbell_depth", "QPs waiting on the send pipeline's run list.", prometheus.GaugeValue, float64(d.Dev.Observer().DoorbellDepth()), dev)
		type typeState struct{ typ, state string }
		count := map[typeState]int{}
		for _, q := range d.qps() {
			count[typeState{q.Type, q.State}]++
			if !c.m.cfg.QPMetrics {
				continue
			}
			qpn := fmt.Sprintf("%#x", q.QPN)
			emit("rnicd_qp_info", "Always 1, per QP: its number, type and state as labels.", prometheus.GaugeValue, 1,
				prometheus.Labels{"device": d.Dev.Name(), "qpn": qpn, "type": q.Type, "state": q.State})
			l := prometheus.Labels{"device": d.Dev.Name(), "qpn": qpn, "type": q.Type}
			emit("rnicd_qp_sq_used", "Send queue WQEs posted and not yet completed, per QP.", prometheus.GaugeValue, float64(q.SQUsed), l)
			emit("rnicd_qp_sq_inflight", "Send queue WQEs sent and awaiting acknowledgment, per QP.", prometheus.GaugeValue, float64(q.SQInFlight), l)
			emit("rnicd_qp_rq_used", "Receive queue WQEs posted and not yet consumed, per QP.", prometheus.GaugeValue, float64(q.RQUsed), l)
			if q.CC.HasCongestion {
				emit("rnicd_qp_cc_rate_bps", "DCQCN current rate of the QP, bits per second.", prometheus.GaugeValue, float64(q.CC.CurrentRate), l)
				emit("rnicd_qp_cc_target_rate_bps", "DCQCN target rate of the QP, bits per second.", prometheus.GaugeValue, float64(q.CC.TargetRate), l)
				// The reaction point keeps alpha in 1024ths, as ConnectX does.
				emit("rnicd_qp_cc_alpha_ratio", "DCQCN alpha of the QP, the congestion estimate each CNP cuts the rate by, 0 to 1.", prometheus.GaugeValue, float64(q.CC.Alpha)/1024, l)
			}
		}
		for k, n := range count {
			emit("rnicd_qps", "QPs of the device, by type and state.", prometheus.GaugeValue, float64(n),
				prometheus.Labels{"device": d.Dev.Name(), "type": k.typ, "state": k.state})
		}
	}
}
