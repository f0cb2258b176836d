/*
 * A Sparkplug B edge node built on Eclipse Tahu's Java edge client (org.eclipse.tahu:tahu-edge-compat
 * from Maven Central, a shaded jar holding tahu-core, tahu-edge, Paho, protobuf and logback), for
 * the connector's interop tests (tests/interop/test_sparkplug_edge_nodes.py).
 *
 *   java -cp <tahu-edge-compat jar>:<this jar> mqtt.lakehouse.tahuedge.TahuEdgeNode PORT
 *        [--host 127.0.0.1] [--group G] [--node N] [--device D]
 *
 * The jar's own main class (org.eclipse.tahu.edge.SparkplugEdgeNode) cannot be pointed at a
 * broker: it connects to tcp://localhost:1883, waits for the STATE of host "IamHost", sends
 * random values without aliases every 5 s for 6 minutes and watches /tmp/commands. This class
 * drives the same library pieces (EdgeClient, its MetricMap of aliases, SparkplugBPayloadEncoder)
 * with values of its own: no primary host (births go out right after CONNACK), aliases on.
 *
 * It publishes, in order: NBIRTH with one metric of every datatype Tahu's MetricDataType has
 * (1-19 and the arrays 22-34) plus bdSeq (Int64 0); DBIRTH of one device; two NDATA and two
 * DDATA; then EdgeClient.shutdown(), which publishes DDEATH, then NDEATH (the Will's topic and
 * payload, bdSeq 0, published by TahuClient.publishLwt) and sends DISCONNECT: the broker does
 * not publish the Will itself.
 *
 * What the library does (tahu-core and tahu-edge 1.0.21 sources, SparkplugBPayloadEncoder,
 * EdgeClient, MetricMap):
 * - Int8, Int16, Int32 go in int_value via setIntValue of the Java value: Int8 -1 is the int -1,
 *   which protobuf writes as the uint32 4294967295. UInt8 and UInt16 in int_value; Int64, UInt32,
 *   UInt64 (a BigInteger) and DateTime (Date.getTime(), milliseconds) in long_value.
 * - Arrays are little-endian packed bytes in bytes_value; BooleanArray a 4-byte count, then the
 *   bits, most significant first; StringArray NUL-terminated UTF-8; DateTimeArray 8-byte
 *   milliseconds.
 * - File in bytes_value with metadata.file_name set.
 * - With aliases on, publishNodeBirth numbers every NBIRTH metric from 0 in order, then appends
 *   "Node Control/Rebirth" (Boolean, no alias); publishDeviceBirth goes on numbering.
 *   publishNodeData/publishDeviceData replace each name by its alias, and NDATA, DDATA, NCMD
 *   and DCMD are encoded with their datatypes stripped, template members' datatypes included.
 *
 * Prints one line of JSON to stdout before the shutdown: each message published, each metric
 * with its birth name, alias, datatype and value (DateTime as epoch milliseconds, Bytes and File
 * as {"hex": ...}). Logging goes to stderr.
 */

package mqtt.lakehouse.tahuedge;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.jar.JarFile;
import java.util.jar.Manifest;

import org.eclipse.paho.client.mqttv3.MqttMessage;
import org.eclipse.tahu.edge.EdgeClient;
import org.eclipse.tahu.edge.api.MetricHandler;
import org.eclipse.tahu.message.SparkplugBPayloadEncoder;
import org.eclipse.tahu.message.model.DataSet;
import org.eclipse.tahu.message.model.DataSetDataType;
import org.eclipse.tahu.message.model.DeviceDescriptor;
import org.eclipse.tahu.message.model.EdgeNodeDescriptor;
import org.eclipse.tahu.message.model.File;
import org.eclipse.tahu.message.model.MessageType;
import org.eclipse.tahu.message.model.Metric;
import org.eclipse.tahu.message.model.Metric.MetricBuilder;
import org.eclipse.tahu.message.model.MetricDataType;
import org.eclipse.tahu.message.model.Parameter;
import org.eclipse.tahu.message.model.ParameterDataType;
import org.eclipse.tahu.message.model.PropertyDataType;
import org.eclipse.tahu.message.model.PropertySet.PropertySetBuilder;
import org.eclipse.tahu.message.model.PropertyValue;
import org.eclipse.tahu.message.model.Row;
import org.eclipse.tahu.message.model.Row.RowBuilder;
import org.eclipse.tahu.message.model.SparkplugBPayload;
import org.eclipse.tahu.message.model.SparkplugBPayload.SparkplugBPayloadBuilder;
import org.eclipse.tahu.message.model.SparkplugBPayloadMap;
import org.eclipse.tahu.message.model.SparkplugBPayloadMap.SparkplugBPayloadMapBuilder;
import org.eclipse.tahu.message.model.SparkplugDescriptor;
import org.eclipse.tahu.message.model.SparkplugMeta;
import org.eclipse.tahu.message.model.Template;
import org.eclipse.tahu.message.model.Template.TemplateBuilder;
import org.eclipse.tahu.message.model.Topic;
import org.eclipse.tahu.message.model.Value;
import org.eclipse.tahu.model.MqttServerDefinition;
import org.eclipse.tahu.mqtt.ClientCallback;
import org.eclipse.tahu.mqtt.MqttClientId;
import org.eclipse.tahu.mqtt.MqttServerName;
import org.eclipse.tahu.mqtt.MqttServerUrl;

public final class TahuEdgeNode implements MetricHandler, ClientCallback {

	private static final long BD_SEQ = 0L;
	private static final long DEADLINE_MS = 30_000L;
	private static final BigInteger UINT64_MAX = new BigInteger("18446744073709551615");

	private final EdgeNodeDescriptor node;
	private final String deviceId;
	private final Topic deathTopic;
	private final List<Object> report = new ArrayList<>();
	private EdgeClient edgeClient;
	private volatile boolean birthsPublished;
	private volatile Throwable birthFailure;

	private TahuEdgeNode(String groupId, String edgeNodeId, String deviceId) {
		this.node = new EdgeNodeDescriptor(groupId, edgeNodeId);
		this.deviceId = deviceId;
		this.deathTopic = new Topic(SparkplugMeta.SPARKPLUG_B_TOPIC_PREFIX, node, MessageType.NDEATH);
	}

	public static void main(String[] args) throws Exception {
		if (args.length < 1) {
			usage();
		}
		int port = Integer.parseInt(args[0]);
		String host = option(args, "--host", "127.0.0.1");
		TahuEdgeNode edge = new TahuEdgeNode(option(args, "--group", "interop"),
				option(args, "--node", "tahu-java"), option(args, "--device", "device1"));
		System.exit(edge.run(host, port));
	}

	private static void usage() {
		System.err.println("usage: TahuEdgeNode PORT [--host H] [--group G] [--node N] [--device D]");
		System.exit(2);
	}

	private static String option(String[] args, String name, String fallback) {
		for (int i = 1; i < args.length; i++) {
			if (args[i].equals(name)) {
				if (i + 1 >= args.length) {
					usage();
				}
				return args[i + 1];
			}
		}
		return fallback;
	}

	private int run(String host, int port) throws Exception {
		MqttServerDefinition server = new MqttServerDefinition(new MqttServerName("interop"),
				new MqttClientId(node.getEdgeNodeId() + "-" + ProcessHandle.current().pid(), false),
				new MqttServerUrl("tcp://" + host + ":" + port), null, null, 30, deathTopic);
		edgeClient = new EdgeClient(this, node, List.of(deviceId), null, true, 0L, List.of(server), this, null);
		Thread thread = new Thread(edgeClient, "tahu-edge-client");
		thread.setDaemon(true);
		thread.start();

		long deadline = System.currentTimeMillis() + DEADLINE_MS;
		while (!(birthsPublished && edgeClient.isConnectedToPrimaryHost())) {
			if (birthFailure != null) {
				throw new IllegalStateException("the births failed", birthFailure);
			}
			if (System.currentTimeMillis() > deadline) {
				System.err.println("TahuEdgeNode: no births within " + DEADLINE_MS + " ms");
				return 1;
			}
			Thread.sleep(10);
		}
		publishData();
		System.out.println(Json.write(document()));
		System.out.flush();
		edgeClient.shutdown();
		return 0;
	}

	private Map<String, Object> document() {
		Map<String, Object> out = new LinkedHashMap<>();
		Map<String, Object> library = new LinkedHashMap<>();
		library.put("tahu-edge-compat", tahuVersion());
		out.put("library", library);
		out.put("group_id", node.getGroupId());
		out.put("edge_node_id", node.getEdgeNodeId());
		out.put("device_id", deviceId);
		out.put("end", "DDEATH, then NDEATH published by EdgeClient.shutdown(), then DISCONNECT: no Will");
		out.put("messages", report);
		return out;
	}

	/** The Tahu-Version of the jar EdgeClient came from (null when it says none). */
	private static String tahuVersion() {
		try (JarFile jar = new JarFile(new java.io.File(
				EdgeClient.class.getProtectionDomain().getCodeSource().getLocation().toURI()))) {
			Manifest manifest = jar.getManifest();
			return manifest == null ? null : manifest.getMainAttributes().getValue("Tahu-Version");
		} catch (Exception e) {
			return null;
		}
	}

	// ------------------------------------------------------------------ the metrics

	/** Node metrics: name, datatype, birth value, first and second NDATA values (null: not sent). */
	private static List<Object[]> nodeMetrics() throws Exception {
		Date t1 = new Date(1700000000123L);
		Date t2 = new Date(0L);
		Date t3 = new Date(4102444800000L);
		return List.of(
				row("Int8", MetricDataType.Int8, (byte) -1, Byte.MIN_VALUE, Byte.MAX_VALUE),
				row("Int16", MetricDataType.Int16, (short) -2, Short.MIN_VALUE, Short.MAX_VALUE),
				row("Int32", MetricDataType.Int32, -5, Integer.MIN_VALUE, Integer.MAX_VALUE),
				row("Int64", MetricDataType.Int64, -7L, Long.MIN_VALUE, Long.MAX_VALUE),
				row("UInt8", MetricDataType.UInt8, (short) 200, (short) 255, (short) 0),
				row("UInt16", MetricDataType.UInt16, 60000, 65535, 0),
				row("UInt32", MetricDataType.UInt32, 4294967295L, 0L, 3000000000L),
				row("UInt64", MetricDataType.UInt64, UINT64_MAX, new BigInteger("9223372036854775808"),
						BigInteger.ZERO),
				row("Float", MetricDataType.Float, 3.14f, -0.5f, 1e-3f),
				row("Double", MetricDataType.Double, 2.718281828459045, -1e300, 0.1),
				row("Boolean", MetricDataType.Boolean, true, false, true),
				row("String", MetricDataType.String, "héllo ✓", "", "second"),
				row("DateTime", MetricDataType.DateTime, t1, t2, t3),
				row("Text", MetricDataType.Text, "a longer\ntext", "text two", null),
				row("UUID", MetricDataType.UUID, "123e4567-e89b-12d3-a456-426614174000",
						"00000000-0000-0000-0000-000000000000", null),
				row("Bytes", MetricDataType.Bytes, new byte[] { 0, 1, 127, -128, -2, -1 }, new byte[0],
						new byte[] { 0x42 }),
				row("File", MetricDataType.File,
						new File("notes.txt", "line one\nline two\n".getBytes(StandardCharsets.UTF_8)),
						new File("other.txt", "other file".getBytes(StandardCharsets.UTF_8)), null),
				row("DataSet", MetricDataType.DataSet, dataSet(1), dataSet(2), null),
				row("_types_/Motor", MetricDataType.Template, template(true, 0, "", 3000), null, null),
				row("Motor1", MetricDataType.Template, template(false, -12, "left", 1500),
						template(false, 1200, "right", 1500), null),
				row("Int8Array", MetricDataType.Int8Array, new Byte[] { -1, 0, 127, -128 }, new Byte[] { 5 },
						new Byte[0]),
				row("Int16Array", MetricDataType.Int16Array, new Short[] { -2, 32767, -32768 },
						new Short[] { 1, 2 }, null),
				row("Int32Array", MetricDataType.Int32Array, new Integer[] { -5, Integer.MAX_VALUE, Integer.MIN_VALUE },
						new Integer[] { 0 }, null),
				row("Int64Array", MetricDataType.Int64Array, new Long[] { -7L, Long.MAX_VALUE, Long.MIN_VALUE },
						new Long[] { 1L }, null),
				row("UInt8Array", MetricDataType.UInt8Array, new Short[] { 0, 200, 255 }, new Short[] { 1 }, null),
				row("UInt16Array", MetricDataType.UInt16Array, new Integer[] { 0, 60000, 65535 },
						new Integer[] { 2 }, null),
				row("UInt32Array", MetricDataType.UInt32Array, new Long[] { 0L, 4294967295L, 3000000000L },
						new Long[] { 3L }, null),
				row("UInt64Array", MetricDataType.UInt64Array,
						new BigInteger[] { BigInteger.ZERO, UINT64_MAX, new BigInteger("9223372036854775808") },
						new BigInteger[] { BigInteger.ONE }, null),
				row("FloatArray", MetricDataType.FloatArray, new Float[] { 3.14f, -0.5f, 1e-3f },
						new Float[] { 1.5f }, null),
				row("DoubleArray", MetricDataType.DoubleArray, new Double[] { 2.718281828459045, -1e300, 0.1 },
						new Double[] { -0.25 }, null),
				row("BooleanArray", MetricDataType.BooleanArray,
						new Boolean[] { true, false, true, true, false, false, false, true, true },
						new Boolean[] { false }, new Boolean[0]),
				row("StringArray", MetricDataType.StringArray, new String[] { "a", "", "héllo ✓" },
						new String[] { "one" }, null),
				row("DateTimeArray", MetricDataType.DateTimeArray, new Date[] { t1, t2, t3 }, new Date[] { t3 },
						null));
	}

	/** Device metrics, the same form. */
	private static List<Object[]> deviceMetrics() {
		return List.of(
				row("dev/Int16", MetricDataType.Int16, (short) -300, (short) -1, (short) 1),
				row("dev/UInt64", MetricDataType.UInt64, UINT64_MAX, BigInteger.valueOf(7),
						new BigInteger("12345678901234567890")),
				row("dev/Double", MetricDataType.Double, -0.125, 1.5, null),
				row("dev/Boolean", MetricDataType.Boolean, false, true, false),
				row("dev/String", MetricDataType.String, "device ✓", "x", null),
				row("dev/DateTime", MetricDataType.DateTime, new Date(1L), new Date(1700000000999L), null),
				row("dev/Int32Array", MetricDataType.Int32Array, new Integer[] { -1, 1 }, new Integer[] { -2 }, null));
	}

	private static Object[] row(String name, MetricDataType type, Object birth, Object first, Object second) {
		return new Object[] { name, type, birth, first, second };
	}

	private static final List<String> DATASET_COLUMNS = List.of("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16",
			"UInt32", "UInt64", "Float", "Double", "Boolean", "String", "DateTime");

	private static DataSet dataSet(int variant) throws Exception {
		List<DataSetDataType> types = List.of(DataSetDataType.Int8, DataSetDataType.Int16, DataSetDataType.Int32,
				DataSetDataType.Int64, DataSetDataType.UInt8, DataSetDataType.UInt16, DataSetDataType.UInt32,
				DataSetDataType.UInt64, DataSetDataType.Float, DataSetDataType.Double, DataSetDataType.Boolean,
				DataSetDataType.String, DataSetDataType.DateTime);
		List<Object[]> rows = variant == 1
				? List.of(
						new Object[] { (byte) -1, (short) -2, -5, -7L, (short) 200, 60000, 4294967295L, UINT64_MAX,
								3.14f, 0.25, true, "a", new Date(1700000000123L) },
						new Object[] { (byte) 127, (short) 32767, Integer.MAX_VALUE, Long.MIN_VALUE, (short) 0, 0, 0L,
								BigInteger.ZERO, -0.5f, -1.5, false, "ü", new Date(0L) })
				: List.<Object[]>of(new Object[] { Byte.MIN_VALUE, Short.MIN_VALUE, Integer.MIN_VALUE, Long.MAX_VALUE,
						(short) 255, 65535, 3000000000L, BigInteger.ONE, 1e-3f, 1e300, true, "", new Date(1L) });
		DataSet.DataSetBuilder builder = new DataSet.DataSetBuilder(types.size());
		for (int i = 0; i < types.size(); i++) {
			builder.addColumnName("c" + DATASET_COLUMNS.get(i)).addType(types.get(i));
		}
		for (Object[] cells : rows) {
			RowBuilder row = new RowBuilder();
			for (int i = 0; i < cells.length; i++) {
				row.addValue(new Value<Object>(types.get(i), cells[i]));
			}
			builder.addRow(row.createRow());
		}
		return builder.createDataSet();
	}

	private static Template template(boolean definition, int rpm, String label, int maxRpm) throws Exception {
		TemplateBuilder builder = new TemplateBuilder().version("v1").definition(definition)
				.addMetric(new MetricBuilder("rpm", MetricDataType.Int32, rpm).createMetric())
				.addMetric(new MetricBuilder("label", MetricDataType.String, label).createMetric())
				.addParameter(new Parameter("maxRpm", ParameterDataType.Int32, maxRpm));
		if (!definition) {
			builder.templateRef("Motor");
		}
		return builder.createTemplate();
	}

	// ------------------------------------------------------------------ publishing

	@Override
	public Topic getDeathTopic() {
		return deathTopic;
	}

	@Override
	public byte[] getDeathPayloadBytes() throws Exception {
		SparkplugBPayload death = new SparkplugBPayloadBuilder().setTimestamp(new Date()).createPayload();
		death.addMetric(new MetricBuilder("bdSeq", MetricDataType.Int64, BD_SEQ).createMetric());
		return new SparkplugBPayloadEncoder().getBytes(death, false);
	}

	/** Called by the EdgeClient's thread once connected (no primary host to wait for). */
	@Override
	public void publishBirthSequence() {
		try {
			Date now = new Date();
			SparkplugBPayloadMapBuilder nbirth = new SparkplugBPayloadMapBuilder().setTimestamp(now);
			for (Object[] row : nodeMetrics()) {
				MetricBuilder metric = new MetricBuilder((String) row[0], (MetricDataType) row[1], row[2]);
				if (row[0].equals("Double")) {
					metric.properties(new PropertySetBuilder()
							.addProperty("engUnit", new PropertyValue<>(PropertyDataType.String, "degC"))
							.addProperty("Quality", new PropertyValue<>(PropertyDataType.Int32, 192))
							.createPropertySet());
				}
				nbirth.addMetric(metric.createMetric());
			}
			nbirth.addMetric(new MetricBuilder("bdSeq", MetricDataType.Int64, BD_SEQ).createMetric());
			SparkplugBPayloadMap payload = nbirth.createPayload();
			edgeClient.publishNodeBirth(payload);
			report.add(message("NBIRTH", null, payload.getMetrics(), null));

			SparkplugBPayloadBuilder dbirth = new SparkplugBPayloadBuilder().setTimestamp(now);
			for (Object[] row : deviceMetrics()) {
				dbirth.addMetric(new MetricBuilder((String) row[0], (MetricDataType) row[1], row[2]).createMetric());
			}
			SparkplugBPayload devicePayload = dbirth.createPayload();
			edgeClient.publishDeviceBirth(deviceId, devicePayload);
			report.add(message("DBIRTH", deviceId, devicePayload.getMetrics(), null));
			birthsPublished = true;
		} catch (Throwable t) {
			birthFailure = t;
		}
	}

	private void publishData() throws Exception {
		for (int column = 3; column <= 4; column++) {
			SparkplugBPayload ndata = dataPayload(nodeMetrics(), column);
			List<String> names = names(ndata);
			edgeClient.publishNodeData(ndata);
			report.add(message("NDATA", null, ndata.getMetrics(), names));

			SparkplugBPayload ddata = dataPayload(deviceMetrics(), column);
			List<String> deviceNames = names(ddata);
			edgeClient.publishDeviceData(deviceId, ddata);
			report.add(message("DDATA", deviceId, ddata.getMetrics(), deviceNames));
		}
	}

	private static SparkplugBPayload dataPayload(List<Object[]> rows, int column) throws Exception {
		SparkplugBPayloadBuilder builder = new SparkplugBPayloadBuilder().setTimestamp(new Date());
		for (Object[] row : rows) {
			if (row[column] != null) {
				builder.addMetric(new MetricBuilder((String) row[0], (MetricDataType) row[1], row[column]).createMetric());
			}
		}
		return builder.createPayload();
	}

	private static List<String> names(SparkplugBPayload payload) {
		List<String> out = new ArrayList<>();
		for (Metric metric : payload.getMetrics()) {
			out.add(metric.getName());
		}
		return out;
	}

	/** A message of the report; {@code names} the birth names of DATA metrics (sent as aliases). */
	private static Map<String, Object> message(String type, String device, List<Metric> metrics, List<String> names) {
		List<Object> out = new ArrayList<>();
		for (int i = 0; i < metrics.size(); i++) {
			Metric metric = metrics.get(i);
			Map<String, Object> entry = new LinkedHashMap<>();
			entry.put("name", names == null ? metric.getName() : names.get(i));
			entry.put("alias", metric.getAlias());
			entry.put("datatype", metric.getDataType().toString());
			entry.put("value", report(metric.getValue()));
			out.add(entry);
		}
		Map<String, Object> message = new LinkedHashMap<>();
		message.put("message_type", type);
		message.put("device_id", device);
		message.put("metrics", out);
		return message;
	}

	/** A value as the report gives it. */
	private static Object report(Object value) {
		if (value instanceof Date) {
			return ((Date) value).getTime();
		}
		if (value instanceof byte[]) {
			return Map.of("hex", hex((byte[]) value));
		}
		if (value instanceof File) {
			return Map.of("hex", hex(((File) value).getBytes()));
		}
		if (value instanceof Object[]) {
			List<Object> out = new ArrayList<>();
			for (Object item : (Object[]) value) {
				out.add(report(item));
			}
			return out;
		}
		if (value instanceof DataSet) {
			DataSet dataSet = (DataSet) value;
			List<Object> rows = new ArrayList<>();
			for (Row row : dataSet.getRows()) {
				List<Object> cells = new ArrayList<>();
				for (Value<?> cell : row.getValues()) {
					cells.add(report(cell.getValue()));
				}
				rows.add(cells);
			}
			List<Object> types = new ArrayList<>();
			for (DataSetDataType type : dataSet.getTypes()) {
				types.add(type.toString());
			}
			Map<String, Object> out = new LinkedHashMap<>();
			out.put("columns", new ArrayList<Object>(dataSet.getColumnNames()));
			out.put("types", types);
			out.put("rows", rows);
			return out;
		}
		if (value instanceof Template) {
			Template template = (Template) value;
			List<Object> parameters = new ArrayList<>();
			for (Parameter parameter : template.getParameters()) {
				Map<String, Object> p = new LinkedHashMap<>();
				p.put("name", parameter.getName());
				p.put("type", parameter.getType().toString());
				p.put("value", report(parameter.getValue()));
				parameters.add(p);
			}
			List<Object> metrics = new ArrayList<>();
			for (Metric metric : template.getMetrics()) {
				Map<String, Object> m = new LinkedHashMap<>();
				m.put("name", metric.getName());
				m.put("datatype", metric.getDataType().toString());
				m.put("value", report(metric.getValue()));
				metrics.add(m);
			}
			Map<String, Object> out = new LinkedHashMap<>();
			out.put("version", template.getVersion());
			out.put("template_ref", template.getTemplateRef());
			out.put("is_definition", template.isDefinition());
			out.put("parameters", parameters);
			out.put("metrics", metrics);
			return out;
		}
		return value;
	}

	private static String hex(byte[] bytes) {
		StringBuilder out = new StringBuilder();
		for (byte b : bytes) {
			out.append(String.format("%02x", b & 0xff));
		}
		return out.toString();
	}

	// ------------------------------------------------------------------ the rest of the APIs

	@Override
	public boolean hasMetric(SparkplugDescriptor descriptor, String metricName) {
		return false;
	}

	@Override
	public void shutdown() {
	}

	@Override
	public void messageArrived(MqttServerName server, MqttServerUrl url, MqttClientId clientId, String topic,
			MqttMessage message) {
	}

	@Override
	public void connectionLost(MqttServerName server, MqttServerUrl url, MqttClientId clientId, Throwable cause) {
		System.err.println("TahuEdgeNode: connection lost: " + cause);
	}

	@Override
	public void connectComplete(boolean reconnect, MqttServerName server, MqttServerUrl url, MqttClientId clientId) {
	}

	/** Just enough JSON for the report: maps, lists, strings, numbers, booleans and null. */
	static final class Json {
		private Json() {
		}

		static String write(Object value) {
			StringBuilder out = new StringBuilder();
			append(out, value);
			return out.toString();
		}

		private static void append(StringBuilder out, Object value) {
			if (value == null) {
				out.append("null");
			} else if (value instanceof String) {
				string(out, (String) value);
			} else if (value instanceof Boolean || value instanceof Byte || value instanceof Short
					|| value instanceof Integer || value instanceof Long || value instanceof BigInteger) {
				out.append(value);
			} else if (value instanceof Float) {
				out.append(Float.toString((Float) value));
			} else if (value instanceof Double) {
				out.append(Double.toString((Double) value));
			} else if (value instanceof Map) {
				out.append('{');
				boolean first = true;
				for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
					if (!first) {
						out.append(',');
					}
					first = false;
					string(out, String.valueOf(entry.getKey()));
					out.append(':');
					append(out, entry.getValue());
				}
				out.append('}');
			} else if (value instanceof List) {
				out.append('[');
				boolean first = true;
				for (Object item : (List<?>) value) {
					if (!first) {
						out.append(',');
					}
					first = false;
					append(out, item);
				}
				out.append(']');
			} else {
				throw new IllegalArgumentException("no JSON for " + value.getClass() + ": " + Arrays.asList(value));
			}
		}

		private static void string(StringBuilder out, String text) {
			out.append('"');
			for (int i = 0; i < text.length(); i++) {
				char c = text.charAt(i);
				if (c == '"' || c == '\\') {
					out.append('\\').append(c);
				} else if (c < 0x20 || c > 0x7e) {
					out.append(String.format("\\u%04x", (int) c)); // ASCII out, whatever the locale
				} else {
					out.append(c);
				}
			}
			out.append('"');
		}
	}
}
