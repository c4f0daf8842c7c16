// The 3D viewer for application/x-ply artifacts: three.js points with orbit controls, a label
// legend, and a toggle between label colours and the input colours. The job writes a preview PLY
// (mlcore/pointcloud/preview.py: at most a point budget, binary little endian) whose plain
// red/green/blue are the label colours, input_red/input_green/input_blue the input colours, an
// int `label` per point, and the legend as header comments "moelab label ID R G B NAME".
//
// three.js (~600 KB) is imported only when a page holds a point cloud, as charts do with vega.
import { registerRenderer } from "./renderers.js";

const MAX_BYTES = 64 * 2 ** 20;
const LEGEND = /^moelab label (\d+) (\d+) (\d+) (\d+) (.*)$/;

// A WebGL context per viewer; htmx swaps can detach one, and browsers cap live contexts (~16),
// so viewers whose element left the page are disposed before a new one starts.
const live = new Set();

function sweep() {
  for (const viewer of live) {
    if (!viewer.element.isConnected) {
      viewer.dispose();
      live.delete(viewer);
    }
  }
}

// The header as text: the property names decide which attributes PLYLoader must copy raw, and
// the comments carry the legend (PLYLoader does not expose them).
export function readPlyHeader(buffer) {
  const head = new TextDecoder("latin1").decode(new Uint8Array(buffer, 0, Math.min(buffer.byteLength, 65536)));
  const end = head.indexOf("end_header");
  if (!head.startsWith("ply") || end < 0) throw new Error("not a PLY file");
  const properties = [];
  const legend = new Map();
  let element = "";
  for (const line of head.slice(0, end).split(/\r?\n/)) {
    const words = line.trim().split(/\s+/);
    if (words[0] === "element") element = words[1];
    else if (words[0] === "property" && element === "vertex") properties.push(words[words.length - 1]);
    else if (words[0] === "comment") {
      const match = LEGEND.exec(line.trim().slice("comment ".length));
      if (match) legend.set(Number(match[1]), { rgb: [Number(match[2]), Number(match[3]), Number(match[4])], name: match[5] });
    }
  }
  return { properties, legend };
}

function srgbToLinearTable(THREE) {
  const color = new THREE.Color();
  return Float32Array.from({ length: 256 }, (_, v) => color.setRGB(v / 255, 0, 0, THREE.SRGBColorSpace).r);
}

// Colours as 0-255 integers whatever the file stored: floats in [0, 1], bytes, or 16-bit values.
function toBytes(raw) {
  if (raw instanceof Uint8Array) return raw;
  let max = 0;
  for (let i = 0; i < raw.length; i++) if (raw[i] > max) max = raw[i];
  const scale = max <= 1 ? 255 : max > 255 ? 255 / 65535 : 1;
  return Uint8Array.from(raw, (v) => Math.min(255, Math.max(0, Math.round(v * scale))));
}

// Raw colour triples → linear floats; the renderer's sRGB output turns them back exactly.
function linearColors(raw, table) {
  const bytes = toBytes(raw);
  const out = new Float32Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) out[i] = table[bytes[i]];
  return out;
}

function button(label, mode) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "button button-small";
  b.dataset.mode = mode;
  b.textContent = label;
  return b;
}

// The page's surface colour as rgb(): the --surface token is light-dark(light, dark), which only a
// colour property resolves (for this element's theme), so a hidden probe carries it.
function surfaceColour(element) {
  const probe = document.createElement("span");
  probe.hidden = true;
  probe.style.color = "var(--surface)";
  element.append(probe);
  const colour = getComputedStyle(probe).color;
  probe.remove();
  return colour || "#ffffff";
}

function legendBadge(id, entry, count) {
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.dataset.label = String(id);
  const dot = document.createElement("span");
  dot.className = "dot";
  dot.style.background = `rgb(${entry.rgb.join(",")})`; // the label's colour is data, not style
  badge.append(dot, ` ${entry.name} `);
  const n = document.createElement("span");
  n.className = "faint";
  n.textContent = count.toLocaleString();
  badge.append(n);
  return badge;
}

export async function renderPointCloud(element, { url, name }) {
  sweep();
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const size = Number(response.headers.get("Content-Length") || 0);
  if (size > MAX_BYTES) throw new Error(`too large to view (${size} bytes); download it instead`);
  const buffer = await response.arrayBuffer();
  const { properties, legend } = readPlyHeader(buffer);
  const has = (...names) => names.every((n) => properties.includes(n));

  const [THREE, { PLYLoader }, { OrbitControls }] = await Promise.all([
    import("three"),
    import("three/addons/loaders/PLYLoader.js"),
    import("three/addons/controls/OrbitControls.js"),
  ]);
  const loader = new PLYLoader();
  // Copy colours and labels raw: PLYLoader's own colour path rounds linear values to 8 bits,
  // which shifts dark label colours.
  const mapping = {};
  if (has("red", "green", "blue")) mapping.plainRgb = ["red", "green", "blue"];
  if (has("input_red", "input_green", "input_blue")) mapping.inputRgb = ["input_red", "input_green", "input_blue"];
  if (has("label")) mapping.label = ["label"];
  loader.setCustomPropertyNameMapping(mapping);
  const geometry = loader.parse(buffer);
  geometry.deleteAttribute("color");
  const count = geometry.getAttribute("position").count;
  if (!count) throw new Error("the cloud holds no points");
  geometry.center(); // georeferenced coordinates lose precision in float32 shaders far from 0

  const table = srgbToLinearTable(THREE);
  const labels = geometry.getAttribute("label")?.array;
  const modes = {};
  if (labels) {
    const plain = geometry.getAttribute("plainRgb")?.array;
    modes.labels = plain ? linearColors(plain, table) : null;
    const inputs = geometry.getAttribute("inputRgb")?.array;
    if (inputs) modes.input = linearColors(inputs, table);
  } else if (geometry.getAttribute("plainRgb")) {
    modes.input = linearColors(geometry.getAttribute("plainRgb").array, table);
  }
  if (labels && !modes.labels) {
    // A labelled file from elsewhere, without colours: colour by the legend or a hue per id.
    const rgb = new Uint8Array(count * 3);
    const color = new THREE.Color();
    for (let i = 0; i < count; i++) {
      const entry = legend.get(labels[i]);
      const c = entry ? entry.rgb : color.setHSL((labels[i] * 0.618) % 1, 0.7, 0.5).toArray().map((v) => Math.round(v * 255));
      rgb.set(c, i * 3);
    }
    modes.labels = linearColors(rgb, table);
  }
  if (!Object.keys(modes).length) {
    const grey = new Float32Array(count * 3).fill(table[90]);
    modes.input = grey;
  }
  const colorAttribute = new THREE.BufferAttribute(new Float32Array(count * 3), 3);
  geometry.setAttribute("color", colorAttribute);

  // Layout: a toolbar (toggle, point count, legend) above the canvas, in the design system's row.
  element.textContent = "";
  const toolbar = document.createElement("div");
  toolbar.className = "row small";
  toolbar.style.padding = "var(--space-2)";
  const stage = document.createElement("div");
  element.append(toolbar, stage);
  const buttons = [];
  if (modes.labels && modes.input) {
    buttons.push(button("Labels", "labels"), button("Input colours", "input"));
    toolbar.append(...buttons);
  }
  const total = document.createElement("span");
  total.className = "muted";
  total.textContent = `${count.toLocaleString()} points`;
  toolbar.append(total);
  if (labels) {
    const counts = new Map();
    for (let i = 0; i < count; i++) counts.set(labels[i], (counts.get(labels[i]) || 0) + 1);
    const legendList = document.createElement("span");
    legendList.className = "row";
    legendList.dataset.legend = "";
    for (const id of [...counts.keys()].sort((a, b) => a - b)) {
      legendList.append(legendBadge(id, legend.get(id) || { rgb: [128, 128, 128], name: `class ${id}` }, counts.get(id)));
    }
    toolbar.append(legendList);
  }

  const width = () => Math.max(stage.clientWidth || element.clientWidth, 100);
  const height = () => Math.max(element.clientHeight - toolbar.offsetHeight - 2, 160);
  const renderer = new THREE.WebGLRenderer({ antialias: false, preserveDrawingBuffer: true });
  renderer.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
  renderer.setSize(width(), height());
  renderer.domElement.setAttribute("role", "img");
  renderer.domElement.setAttribute("aria-label", `${name || "Point cloud"} in 3D: drag to turn, scroll to zoom, right-drag to pan`);
  renderer.domElement.title = "Drag to turn · scroll to zoom · right-drag to pan";
  stage.append(renderer.domElement);
  const background = surfaceColour(element);
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(background);

  geometry.computeBoundingSphere();
  const radius = Math.max(geometry.boundingSphere.radius, 1e-6);
  const material = new THREE.PointsMaterial({
    size: Math.max((2.4 * radius) / Math.sqrt(count), radius / 800),
    vertexColors: true,
    sizeAttenuation: true,
  });
  scene.add(new THREE.Points(geometry, material));

  // Z up (scans are z-up), looking from above and to the side, the whole cloud in view.
  const camera = new THREE.PerspectiveCamera(50, width() / height(), radius / 1000, radius * 100);
  camera.up.set(0, 0, 1);
  // At radius / sin(fov / 2) the bounding sphere just fits the frame's height.
  const distance = radius / Math.sin((camera.fov / 2) * (Math.PI / 180));
  camera.position.set(0.55, -0.68, 0.48).normalize().multiplyScalar(distance);
  const controls = new OrbitControls(camera, renderer.domElement);
  controls.target.set(0, 0, 0);
  controls.update();

  const draw = () => renderer.render(scene, camera);
  controls.addEventListener("change", draw); // render on demand: no loop burning CPU

  function show(mode) {
    colorAttribute.array.set(modes[mode]);
    colorAttribute.needsUpdate = true;
    element.dataset.mode = mode;
    for (const b of buttons) {
      b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
      b.classList.toggle("button-primary", b.dataset.mode === mode);
    }
    draw();
  }
  for (const b of buttons) b.addEventListener("click", () => show(b.dataset.mode));

  const resize = new ResizeObserver(() => {
    camera.aspect = width() / height();
    camera.updateProjectionMatrix();
    renderer.setSize(width(), height());
    draw();
  });
  resize.observe(element);

  element.dataset.points = String(count);
  show(modes.labels ? "labels" : "input");
  live.add({
    element,
    dispose() {
      resize.disconnect();
      controls.dispose();
      geometry.dispose();
      material.dispose();
      renderer.dispose();
      renderer.forceContextLoss();
    },
  });
}

registerRenderer("application/x-ply", renderPointCloud);
