// Command mochi-broker runs a mochi-mqtt broker (github.com/mochi-mqtt/server/v2) on
// 127.0.0.1 for the connector's interop tests (devtools/interop_brokers.py).
//
// One plain TCP listener on the port given by -port; optional listeners for MQTT over
// WebSocket (-ws-port), over TLS (-tls-port) and over WebSocket with TLS (-wss-port), the TLS
// ones serving -tls-cert and -tls-key (and, with -tls-client-ca, requiring a client
// certificate signed by that CA). With -alpn NAME the -tls-port listener offers only that
// ALPN protocol (RFC 7301), as AWS IoT Core's port 443 does with x-amzn-mqtt-ca: a client
// offering other protocols is refused with a no_application_protocol alert (a client offering
// none gets no ALPN and is served). The WebSocket listeners take any request path and agree to
// the subprotocol "mqtt". Every client and topic is allowed; sessions live in memory (the
// tests restart the client, never the broker). A line
// "mochi-broker ready on 127.0.0.1:PORT (mochi-mqtt VERSION), listeners: URL, URL, ..." goes
// to stdout once every listener is bound, naming each one (tcp://, ws://, ssl://, wss://);
// SIGTERM or SIGINT stops the broker. With -trace every CONNACK, PUBLISH, PUBACK, PUBREC,
// PUBREL and PUBCOMP sent or received is logged with its packet id, QoS and DUP flag (a
// CONNACK with the session-present flag and the size of the session's inflight store, offline
// queue included), so a test's log shows what the broker did on the wire.
//
// With -inflight-v311 N (N > 0) the broker keeps an in-flight window per client, as
// Mosquitto 2.0.12+ (max_inflight_messages, default 20) and EMQX (max_inflight, default 32)
// do: at most N unacknowledged QoS 1/2 messages to an MQTT 3.1 or 3.1.1 client, at most its
// Receive Maximum to an MQTT 5 client, the rest queued in order, a resumed session's backlog
// included (window.go: mochi's own send quota gates neither a resumed backlog nor 3.1.1
// clients). Each connection's end is then logged with the most messages it had in flight at
// once ("in-flight window closed ... peak_in_flight=N"). Without the flag (0), mochi's own
// behaviour.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
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
	wsPort := flag.Int("ws-port", 0, "also serve MQTT over WebSocket on this port (0: no)")
	tlsPort := flag.Int("tls-port", 0, "also serve MQTT over TLS on this port (0: no)")
	wssPort := flag.Int("wss-port", 0, "also serve MQTT over WebSocket with TLS on this port (0: no)")
	certFile := flag.String("tls-cert", "", "server certificate (PEM) of the TLS listeners")
	keyFile := flag.String("tls-key", "", "server private key (PEM) of the TLS listeners")
	clientCA := flag.String("tls-client-ca", "", "require client certificates signed by this CA (PEM)")
	alpn := flag.String("alpn", "", "the one ALPN protocol the -tls-port listener accepts")
	inflightV311 := flag.Int("inflight-v311", 0, "at most this many unacknowledged QoS 1/2 "+
		"messages to an MQTT 3.1/3.1.1 client, and the Receive Maximum to an MQTT 5 one, a "+
		"resumed session's backlog included (0: mochi's own behaviour, no limit for 3.1.1)")
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
	if *inflightV311 < 0 || *inflightV311 > math.MaxUint16 {
		fail(logger, "reading the flags", fmt.Errorf("-inflight-v311 must be 0 to %d, got %d",
			math.MaxUint16, *inflightV311))
	}
	if *inflightV311 > 0 {
		if err := server.AddHook(newWindowHook(server, *inflightV311), nil); err != nil {
			fail(logger, "adding the in-flight window hook", err)
		}
	}
	if *trace {
		if err := server.AddHook(new(traceHook), nil); err != nil {
			fail(logger, "adding the trace hook", err)
		}
	}

	var serverTLS *tls.Config
	if *tlsPort != 0 || *wssPort != 0 {
		var err error
		if serverTLS, err = tlsConfig(*certFile, *keyFile, *clientCA); err != nil {
			fail(logger, "loading the TLS certificate", err)
		}
	} else if *certFile != "" || *keyFile != "" || *clientCA != "" || *alpn != "" {
		fail(logger, "reading the flags", errors.New("-tls-cert, -tls-key, -tls-client-ca and "+
			"-alpn need a TLS listener (-tls-port or -wss-port)"))
	}

	address := fmt.Sprintf("127.0.0.1:%d", *port)
	// AddListener binds the port (an error here is a port already taken).
	listener := listeners.NewTCP(listeners.Config{ID: "tcp", Address: address})
	if err := server.AddListener(listener); err != nil {
		fail(logger, "listening on "+address, err)
	}
	urls := []string{"tcp://" + address}
	if *tlsPort != 0 {
		config := serverTLS.Clone()
		if *alpn != "" {
			config.NextProtos = []string{*alpn}
		}
		tlsAddress := fmt.Sprintf("127.0.0.1:%d", *tlsPort)
		tlsListener := listeners.NewTCP(listeners.Config{ID: "tls", Address: tlsAddress,
			TLSConfig: config})
		if err := server.AddListener(tlsListener); err != nil {
			fail(logger, "listening on "+tlsAddress, err)
		}
		urls = append(urls, "ssl://"+tlsAddress)
	}
	for _, ws := range []struct {
		id     string
		port   int
		config *tls.Config
	}{{"ws", *wsPort, nil}, {"wss", *wssPort, serverTLS}} {
		if ws.port == 0 {
			continue
		}
		wsAddress := fmt.Sprintf("127.0.0.1:%d", ws.port)
		// The WebSocket listener binds its port only in Serve, and logs (does not return) a
		// failure there: see now that the port is free, so a taken one fails the start.
		if err := portFree(wsAddress); err != nil {
			fail(logger, "listening on "+wsAddress, err)
		}
		wsListener := listeners.NewWebsocket(listeners.Config{ID: ws.id, Address: wsAddress,
			TLSConfig: ws.config})
		if err := server.AddListener(wsListener); err != nil {
			fail(logger, "listening on "+wsAddress, err)
		}
		urls = append(urls, ws.id+"://"+wsAddress)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	if err := server.Serve(); err != nil {
		fail(logger, "serving", err)
	}
	fmt.Printf("mochi-broker ready on %s (mochi-mqtt %s), listeners: %s\n", address, mqtt.Version,
		strings.Join(urls, ", "))

	received := <-stop
	logger.Info("stopping", "signal", received.String())
	_ = server.Close()
}

// tlsConfig is the server side of the TLS listeners: the certificate and key, and with a
// client CA, client certificates required and verified.
func tlsConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS listener needs -tls-cert and -tls-key")
	}
	certificate, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	config := &tls.Config{Certificates: []tls.Certificate{certificate}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", clientCA)
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return config, nil
}

// portFree binds address and lets it go: an error names a port already taken.
func portFree(address string) error {
	probe, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	return probe.Close()
}

func fail(logger *slog.Logger, what string, err error) {
	logger.Error("mochi-broker failed", "while", what, "error", err)
	os.Exit(1)
}
