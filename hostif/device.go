package hostif

import (
	"cmp"
	"slices"

	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic"
)

func (c *conn) queryPort(object, abi.Body, []int) (abi.Body, []int, error) {
	p := c.s.dev.QueryPort()
	return &abi.PortReply{Name: c.s.name, Addr: p.Addr.As16(), GID: p.GID, ActiveMTU: uint32(p.ActiveMTU),
		State: c.s.portState()}, nil, nil
}

func (c *conn) counters(object, abi.Body, []int) (abi.Body, []int, error) {
	m := c.s.dev.Observer().Counters()
	for k, v := range c.s.Counters() {
		m[k] = v
	}
	return &abi.CountersReply{Counters: m}, nil, nil
}

func (c *conn) listQPs(_ object, b abi.Body, _ []int) (abi.Body, []int, error) {
	from := b.(*abi.ListQPsReq).From
	out := &abi.ListQPsReply{}
	// A page is the QPs from QPN from on, in QPN order: the device's
	// table is a map, and paging its order lost most QPs past the first
	// page (1,888 of 57,334 listed in TestHogsFillDaemon).
	qps := slices.DeleteFunc(c.s.dev.QPs(), func(qp *rnic.QP) bool { return qp.QPN < from })
	slices.SortFunc(qps, func(a, b *rnic.QP) int { return cmp.Compare(a.QPN, b.QPN) })
	for _, qp := range qps {
		if len(out.Rows) == abi.MaxRows {
			out.More, out.Next = true, qp.QPN
			break
		}
		row := abi.QPRow{QPN: qp.QPN, Comm: "rnicd"}
		if o, ok := c.s.qps.Load(qp.QPN); ok {
			q := o.(*qpObj)
			row.PID, row.Comm = uint32(q.owner.pid), q.owner.comm
		}
		st := c.s.dev.Observer().Status(qp)
		row.Type, row.State, row.PathMTU = qp.VerbsType(), st.Attr.State, st.Attr.PathMTU
		row.SQPSN, row.RQPSN, row.DestQPN = st.SQPSN, st.RQPSN, st.Attr.DestQPN
		row.Dest = st.Attr.AH.DGID
		row.SQDepth, row.RQDepth = uint32(st.SQUsed), uint32(st.RQUsed)
		out.Rows = append(out.Rows, row)
	}
	return out, nil, nil
}
