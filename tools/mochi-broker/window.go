package main

// The in-flight window of -inflight-v311 (windowHook): at most N unacknowledged QoS 1/2
// PUBLISHes per MQTT 3.1/3.1.1 client, as Mosquitto 2.0.12+ (max_inflight_messages, default
// 20) and EMQX (max_inflight, default 32) keep, and at most the client's Receive Maximum per
// MQTT 5 client; the other queued messages wait, in order, for acknowledgements.
//
// Why a hook of its own rather than mochi's send quota alone. mochi-mqtt 2.7.9 keeps a send
// quota per client (Inflight.ResetSendQuota: the MQTT 5 Receive Maximum from ParseConnect, 0
// = unlimited for 3.1.1), but it gates only messages published while the client is
// connected: on a reconnect with a session present, ResendInflightMessages writes the
// session's whole queue at once (a backlog of 20,000 goes out without waiting for one
// acknowledgement), a message the quota held back is deleted from the session once written
// (Server.processPacket, NextImmediate), so its PUBACK gives no quota back, and finding the
// next held message sorts the whole store on every packet read. The hook therefore makes
// mochi hold every QoS 1/2 message (a send quota of 0 out of 1: publishToClient then stores
// it, marked Expiry -1, without writing it) and writes them itself, oldest first, while fewer
// than the window are unacknowledged:
//
//   - OnQosPublish appends each message queued for a session (connected or not) to the
//     session's order; OnQosComplete (PUBACK, PUBCOMP) and OnQosDropped take it out.
//   - OnSessionEstablish (before mochi resumes a session) moves the session's queued PUBLISHes
//     out of mochi's store, so that ResendInflightMessages resends only QoS 2 releases;
//     OnSessionEstablished puts them back and opens the window. A message written on an
//     earlier connection goes out again with DUP=1, one never written with DUP=0. Their topic
//     aliases belonged to the earlier connection: they go out with the topic name and no
//     alias (mochi 2.7.9 itself resends them with aliases the new connection never set).
//   - Writes go through one goroutine per connection: in order, and never blocking the
//     client's read loop.
//
// A QoS 2 message counts against the window until its PUBCOMP, as MQTT 5's Receive Maximum
// says. A message is written only once mochi has finished holding it (Expiry -1): mochi
// raises the quota to 1 while it handles a PUBACK, PUBREL or PUBCOMP (this hook lowers it
// again right after), and a message published to the client in that instant is written by
// mochi itself, past the window; it is counted (OnPacketSent), never written twice. A resumed
// session's backlog never meets that case.

import (
	"container/list"
	"math"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// unsettledRetry is how soon the window looks again at a message mochi is still storing.
const unsettledRetry = 100 * time.Microsecond

// queued is one QoS 1/2 message of a session's queue.
type queued struct {
	id      uint16
	sent    bool // counted in flight on this connection
	written bool // written on this connection
	resend  bool // written on an earlier connection: DUP=1 when written again
	rekey   bool // its packet id went to another message while the session resumed
}

// flowSession is the queue and window of one MQTT session. It moves to the new client object
// when a connection resumes the session.
type flowSession struct {
	mu       sync.Mutex
	owner    *mqtt.Client
	order    *list.List               // *queued, oldest first
	byID     map[uint16]*list.Element // packet id -> element of order
	next     *list.Element            // first element this connection has not passed yet
	window   int
	inflight int                              // counted in flight, not yet acknowledged
	peak     int                              // most in flight at once on this connection
	aliases  map[uint16]string                // topic aliases of the connection queuing them
	stash    map[*list.Element]packets.Packet // PUBLISHes held out of mochi's store on resume
	out      chan *packets.Packet             // this connection's writes; nil while offline
	done     chan struct{}
	retrying bool
}

type windowHook struct {
	mqtt.HookBase
	server *mqtt.Server
	v311   int // window of MQTT 3.1 and 3.1.1 clients

	mu       sync.Mutex
	sessions map[*mqtt.Client]*flowSession
}

func newWindowHook(server *mqtt.Server, v311 int) *windowHook {
	return &windowHook{server: server, v311: v311, sessions: map[*mqtt.Client]*flowSession{}}
}

func (h *windowHook) ID() string { return "inflight-window" }

func (h *windowHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnDisconnect,
		mqtt.OnClientExpired, mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped,
		mqtt.OnPacketSent, mqtt.OnPacketProcessed:
		return true
	}
	return false
}

// windowOf is the client's window: -inflight-v311 below MQTT 5, else its Receive Maximum
// (65,535 when it sent none).
func (h *windowHook) windowOf(cl *mqtt.Client) int {
	if cl.Properties.ProtocolVersion < 5 {
		return h.v311
	}
	if rm := int(cl.Properties.Props.ReceiveMaximum); rm > 0 {
		return rm
	}
	return math.MaxUint16
}

// hold makes mochi store the client's QoS 1/2 messages without writing them: a send quota of
// 0 out of a maximum of 1 (publishToClient holds a message when the quota is 0 and the
// maximum is not).
func hold(cl *mqtt.Client) {
	cl.State.Inflight.ResetSendQuota(1)
	cl.State.Inflight.DecreaseSendQuota()
}

// session returns the client's session, locked, or nil.
func (h *windowHook) session(cl *mqtt.Client) *flowSession {
	h.mu.Lock()
	s := h.sessions[cl]
	h.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.owner != cl { // moved to a newer connection meanwhile
		s.mu.Unlock()
		return nil
	}
	return s
}

func newFlowSession(cl *mqtt.Client) *flowSession {
	return &flowSession{owner: cl, order: list.New(), byID: map[uint16]*list.Element{},
		aliases: map[uint16]string{}}
}

// OnSessionEstablish runs before mochi takes an earlier connection's session over: the
// session's queued PUBLISHes leave mochi's store (or mochi would resend them all at once).
func (h *windowHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	hold(cl)
	existing, found := h.server.Clients.Get(cl.ID)
	h.mu.Lock()
	defer h.mu.Unlock()
	var s *flowSession
	if found {
		if s = h.sessions[existing]; s != nil {
			delete(h.sessions, existing)
			s.mu.Lock()
			s.closeConnection()
			s.mu.Unlock()
		}
	}
	// mochi's rule (inheritClientSession): a clean start, or a 3.1.1 clean session before,
	// discards the session.
	if s == nil || pk.Connect.Clean ||
		(existing.Properties.Clean && existing.Properties.ProtocolVersion < 5) {
		h.sessions[cl] = newFlowSession(cl)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owner = cl
	// Still stashed: the connection that resumed the session last ended before its CONNACK.
	unrestored := s.stash
	s.stash = map[*list.Element]packets.Packet{}
	s.takeQueued(existing, s.order.Front(), unrestored)
	// A PUBLISH left in mochi's store that the queue did not know (none expected) joins its
	// end. (GetAll sorts the whole store: only when something is left.)
	if existing.State.Inflight.Len() > 0 {
		var first *list.Element
		for _, stored := range existing.State.Inflight.GetAll(false) {
			if _, known := s.byID[stored.PacketID]; !known &&
				stored.FixedHeader.Type == packets.Publish {
				e := s.order.PushBack(&queued{id: stored.PacketID})
				s.byID[stored.PacketID] = e
				if first == nil {
					first = e
				}
			}
		}
		s.takeQueued(existing, first, nil)
	}
	s.aliases = map[uint16]string{}
	h.sessions[cl] = s
}

// takeQueued moves the queued PUBLISHes from element e on out of the previous connection's
// store into the stash, to go out again on the new connection (s.mu held).
func (s *flowSession) takeQueued(existing *mqtt.Client, e *list.Element,
	unrestored map[*list.Element]packets.Packet) {
	for ; e != nil; e = e.Next() {
		q := e.Value.(*queued)
		q.resend = q.resend || q.written
		q.sent, q.written = false, false
		stored, ok := unrestored[e]
		if !ok {
			stored, ok = existing.State.Inflight.Get(q.id)
			if !ok || stored.FixedHeader.Type != packets.Publish {
				continue // gone, or a QoS 2 release: mochi resends it
			}
			existing.State.Inflight.Delete(q.id)
		}
		if stored.Properties.TopicAlias > 0 {
			if stored.TopicName == "" {
				stored.TopicName = s.aliases[stored.Properties.TopicAlias]
			}
			stored.Properties.TopicAlias = 0
			stored.Properties.TopicAliasFlag = false
		}
		stored.Expiry = -1 // held
		s.stash[e] = stored
	}
}

// OnSessionEstablished runs once mochi has sent CONNACK and resent the session's QoS 2
// releases: the held PUBLISHes return to mochi's store and the window opens.
func (h *windowHook) OnSessionEstablished(cl *mqtt.Client, pk packets.Packet) {
	hold(cl) // mochi resets the quota of a resumed session's store
	s := h.session(cl)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	// First the stashed messages whose packet id is still free, then new ids for the others
	// (a message published to the client while it resumed may have taken theirs).
	var rekey []*list.Element
	for e, stored := range s.stash {
		q := e.Value.(*queued)
		if _, taken := cl.State.Inflight.Get(q.id); taken || q.rekey {
			rekey = append(rekey, e)
			continue
		}
		cl.State.Inflight.Set(stored)
	}
	for _, e := range rekey {
		q := e.Value.(*queued)
		if s.byID[q.id] == e {
			delete(s.byID, q.id)
		}
		id, err := cl.NextPacketID()
		if err != nil {
			h.Log.Warn("no packet id left for a queued message: dropped", "client", cl.ID)
			s.order.Remove(e)
			continue
		}
		stored := s.stash[e]
		q.id, q.rekey, stored.PacketID = uint16(id), false, uint16(id)
		s.byID[q.id] = e
		cl.State.Inflight.Set(stored)
	}
	s.stash = nil
	s.window = h.windowOf(cl)
	s.next = s.order.Front()
	s.inflight, s.peak = 0, 0
	s.out = make(chan *packets.Packet, s.window)
	s.done = make(chan struct{})
	go writeLoop(cl, s.out, s.done)
	h.Log.Info("in-flight window open", "client", cl.ID, "version", cl.Properties.ProtocolVersion,
		"window", s.window, "queued", s.order.Len())
	s.pump(cl)
}

// writeLoop writes one connection's messages in the order the window let them go.
func writeLoop(cl *mqtt.Client, out <-chan *packets.Packet, done <-chan struct{}) {
	for {
		select {
		case pk := <-out:
			_ = cl.WritePacket(*pk) // a closed connection: the next one resends
		case <-done:
			return
		}
	}
}

// closeConnection stops this connection's writes (s.mu held).
func (s *flowSession) closeConnection() {
	if s.out != nil {
		close(s.done)
		s.out, s.done = nil, nil
	}
}

// pump lets queued messages go, oldest first, while the window has room (s.mu held).
func (s *flowSession) pump(cl *mqtt.Client) {
	for s.out != nil && s.inflight < s.window && s.next != nil {
		e := s.next
		q := e.Value.(*queued)
		if q.sent {
			s.next = e.Next()
			continue
		}
		stored, ok := cl.State.Inflight.Get(q.id)
		if !ok {
			s.remove(e)
			continue
		}
		isPublish := stored.FixedHeader.Type == packets.Publish
		if isPublish && stored.Expiry != -1 {
			// mochi is still storing it (or, rarely, writing it itself: OnPacketSent counts it).
			s.retryLater(cl)
			break
		}
		s.next = e.Next()
		q.sent = true
		s.inflight++
		if isPublish {
			stored.FixedHeader.Dup = q.resend
			s.out <- &stored // never blocks: at most window writes are pending
		} // else a QoS 2 release mochi resent: in flight until its PUBCOMP
	}
	s.peak = max(s.peak, s.inflight)
}

func (s *flowSession) retryLater(cl *mqtt.Client) {
	if s.retrying {
		return
	}
	s.retrying = true
	time.AfterFunc(unsettledRetry, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.retrying = false
		if s.owner == cl {
			s.pump(cl)
		}
	})
}

// remove takes a message out of the queue (s.mu held).
func (s *flowSession) remove(e *list.Element) {
	q := e.Value.(*queued)
	if s.next == e {
		s.next = e.Next()
	}
	if q.sent {
		s.inflight--
	}
	if s.byID[q.id] == e {
		delete(s.byID, q.id)
	}
	s.order.Remove(e)
}

func (h *windowHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, resends int) {
	if pk.FixedHeader.Type != packets.Publish {
		return // a QoS 2 PUBREC or PUBREL record
	}
	s := h.session(cl)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	if e, known := s.byID[pk.PacketID]; known {
		if _, stashed := s.stash[e]; stashed {
			e.Value.(*queued).rekey = true // its id went to this message while resuming
			delete(s.byID, pk.PacketID)
		} else {
			s.remove(e) // mochi deleted it without a hook (a dropped direct write)
		}
	}
	if pk.Properties.TopicAlias > 0 && pk.TopicName != "" {
		s.aliases[pk.Properties.TopicAlias] = pk.TopicName
	}
	e := s.order.PushBack(&queued{id: pk.PacketID})
	s.byID[pk.PacketID] = e
	if s.next == nil {
		s.next = e
	}
	s.pump(cl)
}

func (h *windowHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	hold(cl) // mochi raised the quota with this acknowledgement
	if pk.FixedHeader.Type != packets.Puback && pk.FixedHeader.Type != packets.Pubcomp {
		return // a QoS 2 message from the client completed
	}
	h.finished(cl, pk.PacketID, false)
}

func (h *windowHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	h.finished(cl, pk.PacketID, true)
}

// finished takes an acknowledged (or dropped) message out of the queue and lets the next go.
func (h *windowHook) finished(cl *mqtt.Client, id uint16, dropped bool) {
	s := h.session(cl)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return
	}
	if _, stored := cl.State.Inflight.Get(id); dropped && stored {
		return // another record with this id was dropped
	}
	s.remove(e)
	s.pump(cl)
}

// OnPacketSent notes each QoS 1/2 PUBLISH written, counting one mochi wrote itself in flight.
func (h *windowHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, b []byte) {
	if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0 {
		return
	}
	s := h.session(cl)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	if e, ok := s.byID[pk.PacketID]; ok {
		q := e.Value.(*queued)
		q.written = true
		if !q.sent {
			q.sent = true
			s.inflight++
			s.peak = max(s.peak, s.inflight)
		}
	}
}

// OnPacketProcessed runs just before mochi would write a held message itself (when the quota
// is above 0): a packet that raised the quota has it lowered again.
func (h *windowHook) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, err error) {
	cl.State.Inflight.DecreaseSendQuota()
}

func (h *windowHook) OnDisconnect(cl *mqtt.Client, err error, expire bool) {
	s := h.session(cl)
	if s == nil {
		return
	}
	s.closeConnection()
	h.Log.Info("in-flight window closed", "client", cl.ID, "window", s.window,
		"peak_in_flight", s.peak, "in_flight", s.inflight, "queued", s.order.Len())
	s.mu.Unlock()
	if expire {
		h.forget(cl)
	}
}

func (h *windowHook) OnClientExpired(cl *mqtt.Client) { h.forget(cl) }

func (h *windowHook) forget(cl *mqtt.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[cl]; s != nil && s.owner == cl {
		delete(h.sessions, cl)
	}
}
