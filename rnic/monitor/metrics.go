package monitor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rnicd/rnicd/internal/buildinfo"
	"github.com/rnicd/rnicd/wire/ibudp"
)

// collector reads the devices' counters at every scrape. Metric names:
//
//	rnicd_<counter>_total{device}        every device counter, rxe's names (sent_pkts, rcvd_seq_err, ...) and each drop reason,
//	                                     and the CM agent's, Linux's names (cm_tx_msgs_req, cm_rx_msgs_rep, cm_tx_retries, ...)
//	rnicd_port_<counter>_total{device}   the port's counters (icrc_err, rx_kernel_drops, ...)
//	rnicd_fault_<what>_total{device,dir} what the fault injector did (dropped, duplicated, ...)
//	rnicd_doorbell_depth{device}         QPs waiting for the send pipeline
//	rnicd_qp_<field>{device,qpn,type}    per QP: sq_psn, una_psn, rq_psn, sq_used, sq_inflight, rq_used
//	rnicd_qp_state{device,qpn,type,state} 1 for the QP's state
//
// The names of the counters come from the devices, so the collector is
// unchecked (it describes nothing up front).
type collector struct{ m *Monitor }

func (collector) Describe(chan<- *prometheus.Desc) {}

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
			emit("rnicd_"+name+"_total", "Device counter "+name+" (rxe's name where rxe has one).", prometheus.CounterValue, float64(v), dev)
		}
		d.Dev.PortStats().Each(func(name string, v uint64) {
			emit("rnicd_port_"+name+"_total", "Port counter "+name+".", prometheus.CounterValue, float64(v), dev)
		})
		if d.Faulty != nil {
			fs := d.faultStats()
			for dir, fc := range map[string]ibudp.FaultCounts{"tx": fs.TX, "rx": fs.RX} {
				l := prometheus.Labels{"device": d.Dev.Name(), "dir": dir}
				for name, v := range map[string]uint64{"packets": fc.Packets, "matched": fc.Matched, "dropped": fc.Dropped,
					"duplicated": fc.Duplicated, "corrupted": fc.Corrupted, "reordered": fc.Reordered,
					"delayed": fc.Delayed, "overflow": fc.Overflow,
					"link_queued": fc.LinkPackets, "link_dropped": fc.LinkDropped, "link_marked": fc.Marked} {
					emit("rnicd_fault_"+name+"_total", "Packets the fault injector "+name+".", prometheus.CounterValue, float64(v), l)
				}
				emit("rnicd_fault_link_queue_bytes", "Bytes in the bottleneck link's queue.", prometheus.GaugeValue, float64(fc.QueueDepth), l)
				emit("rnicd_fault_link_queue_peak_bytes", "The most bytes the bottleneck link's queue held.", prometheus.GaugeValue, float64(fc.QueuePeak), l)
			}
		}
		emit("rnicd_doorbell_depth", "QPs waiting on the send pipeline's run list.", prometheus.GaugeValue, float64(d.Dev.DoorbellDepth()), dev)
		for _, q := range d.qps() {
			l := prometheus.Labels{"device": d.Dev.Name(), "qpn": fmt.Sprintf("%#x", q.QPN), "type": q.Type}
			for name, v := range map[string]int{"sq_psn": int(q.SQPSN), "una_psn": int(q.UnaPSN), "rq_psn": int(q.RQPSN),
				"sq_used": q.SQUsed, "sq_inflight": q.SQInFlight, "rq_used": q.RQUsed} {
				emit("rnicd_qp_"+name, "QP "+name+".", prometheus.GaugeValue, float64(v), l)
			}
			if q.CC.HasCongestion {
				emit("rnicd_qp_cc_rate_bps", "QP's current rate (congestion control), bits per second.", prometheus.GaugeValue, float64(q.CC.CurrentRate), l)
				emit("rnicd_qp_cc_target_rate_bps", "QP's target rate (congestion control), bits per second.", prometheus.GaugeValue, float64(q.CC.TargetRate), l)
				emit("rnicd_qp_cc_alpha", "QP's DCQCN alpha, in 1024ths.", prometheus.GaugeValue, float64(q.CC.Alpha), l)
			}
			ls := prometheus.Labels{"device": d.Dev.Name(), "qpn": fmt.Sprintf("%#x", q.QPN), "type": q.Type, "state": q.State}
			emit("rnicd_qp_state", "1 for the QP's state.", prometheus.GaugeValue, 1, ls)
		}
	}
}
