// Command mochi-broker runs a mochi-mqtt broker (github.com/mochi-mqtt/server/v2) on
// 127.0.0.1 for the connector's interop tests (tests/interop_brokers.py).
//
// One plain TCP listener on the port given by -port; every client and topic is allowed;
// sessions live in memory (the tests restart the client, never the broker). A line
// "mochi-broker ready on 127.0.0.1:PORT" goes to stdout once the listener accepts
// connections; SIGTERM or SIGINT stops the broker. With -trace every CONNACK, PUBLISH,
// PUBACK, PUBREC, PUBREL and PUBCOMP sent or received is logged with its packet id, QoS and
// DUP flag (a CONNACK with the session-present flag and the size of the session's inflight
// store, offline queue included), so a test's log shows what the broker did on the wire.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// traceHook logs the QoS 1 and 2 packets of every exchange, both ways.
type traceHook struct {
	mqtt.HookBase
}

func (h *traceHook) ID() string { return "wire-trace" }

func (h *traceHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnPacketSent, mqtt.OnPacketRead, mqtt.OnQosDropped,
		mqtt.OnPublishDropped, mqtt.OnDisconnect}, []byte{b})
}

func (h *traceHook) OnDisconnect(cl *mqtt.Client, err error, expire bool) {
	h.Log.Info("client disconnected", "client", cl.ID, "error", err, "session_expires", expire)
}

var kinds = map[byte]string{
	packets.Connack: "CONNACK",
	packets.Publish: "PUBLISH",
	packets.Puback:  "PUBACK",
	packets.Pubrec:  "PUBREC",
	packets.Pubrel:  "PUBREL",
	packets.Pubcomp: "PUBCOMP",
}

func (h *traceHook) trace(direction string, cl *mqtt.Client, pk packets.Packet) {
	kind, ok := kinds[pk.FixedHeader.Type]
	if !ok {
		return
	}
	args := []any{"client", cl.ID, "id", pk.PacketID}
	if pk.FixedHeader.Type == packets.Connack {
		args = []any{"client", cl.ID, "clean", cl.Properties.Clean, "session_present",
			pk.SessionPresent, "inflight", cl.State.Inflight.Len()}
	}
	if pk.FixedHeader.Type == packets.Publish {
		args = append(args, "qos", pk.FixedHeader.Qos, "dup", pk.FixedHeader.Dup,
			"topic", pk.TopicName, "payload", string(pk.Payload))
	}
	h.Log.Info(direction+" "+kind, args...)
}

func (h *traceHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, b []byte) {
	h.trace("sent", cl, pk)
}

func (h *traceHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	h.trace("read", cl, pk)
	return pk, nil
}

func (h *traceHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	h.Log.Warn("qos message dropped", "client", cl.ID, "id", pk.PacketID)
}

func (h *traceHook) OnPublishDropped(cl *mqtt.Client, pk packets.Packet) {
	h.Log.Warn("publish dropped", "client", cl.ID, "id", pk.PacketID)
}

func main() {
	port := flag.Int("port", 1883, "TCP port to listen on (127.0.0.1 only)")
	trace := flag.Bool("trace", false, "log every QoS 1/2 packet sent and received")
	debug := flag.Bool("debug", false, "log at debug level")
	flag.Parse()

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: level}))

	capabilities := mqtt.NewDefaultServerCapabilities()
	// Persistent (clean session false) sessions of disconnected clients are never expired.
	// MQTT 3.1.1 clients have no session expiry of their own: this bound is theirs.
	capabilities.MaximumSessionExpiryInterval = math.MaxUint32
	// Messages queued for a disconnected client sit in its inflight store, which the broker
	// otherwise empties after MaximumMessageExpiryInterval (a day by default): 0 keeps them
	// until delivered.
	capabilities.MaximumMessageExpiryInterval = 0
	// The inflight store (offline queue included) holds at most this many QoS 1/2
	// messages per client (default 8192); the most packet ids there are.
	capabilities.MaximumInflight = math.MaxUint16
	// Messages beyond this many unwritten ones for a connected client are dropped
	// (default 8192): a large backlog must not be.
	capabilities.MaximumClientWritesPending = 256 * 1024

	server := mqtt.New(&mqtt.Options{
		Capabilities: capabilities,
		Logger:       logger,
		// $SYS topics once a minute rather than every second: quieter logs.
		SysTopicResendInterval: 60,
	})
	if err := server.AddHook(new(auth.AllowHook), nil); err != nil {
		fail(logger, "adding the allow-all hook", err)
	}
	if *trace {
		if err := server.AddHook(new(traceHook), nil); err != nil {
			fail(logger, "adding the trace hook", err)
		}
	}

	address := fmt.Sprintf("127.0.0.1:%d", *port)
	// AddListener binds the port (an error here is a port already taken).
	listener := listeners.NewTCP(listeners.Config{ID: "tcp", Address: address})
	if err := server.AddListener(listener); err != nil {
		fail(logger, "listening on "+address, err)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	if err := server.Serve(); err != nil {
		fail(logger, "serving", err)
	}
	fmt.Printf("mochi-broker ready on %s (mochi-mqtt %s)\n", address, mqtt.Version)

	received := <-stop
	logger.Info("stopping", "signal", received.String())
	_ = server.Close()
}

func fail(logger *slog.Logger, what string, err error) {
	logger.Error("mochi-broker failed", "while", what, "error", err)
	os.Exit(1)
}
