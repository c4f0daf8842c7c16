// The library's resumable upload: start → chunks at offsets → complete. After a dropped
// connection the server says how many bytes it holds (GET the upload, or a 409 on a chunk),
// and sending resumes from there, so a multi-GB checkpoint never starts over.
const CHUNK_BYTES = 8 * 1024 * 1024;
const RETRIES = 5;
const BLOCK = 512;

// Several loose files (a checkpoint's config.json and weights) go up as one tar archive, which
// the worker unpacks and checks like any other. The archive is a Blob of headers and the files
// themselves, so nothing is read into memory and chunks slice it like a single file.
function tarField(header, offset, length, text) {
  for (let i = 0; i < Math.min(text.length, length); i += 1) header[offset + i] = text.charCodeAt(i);
}

function tarSize(header, size) {
  if (size < 8 ** 11) return tarField(header, 124, 12, `${size.toString(8).padStart(11, "0")}\0`);
  // GNU base-256 for files of 8 GiB and more: a high bit, then the size big-endian.
  header[124] = 0x80;
  for (let i = 135, rest = size; i > 124; i -= 1, rest = Math.floor(rest / 256)) header[i] = rest % 256;
}

function tarHeader(path, size, mtime) {
  const bytes = new TextEncoder().encode(path);
  const name = String.fromCharCode(...bytes);
  let prefix = "";
  let rest = name;
  if (name.length > 100) {
    const cut = name.lastIndexOf("/", 155);
    if (cut < 0 || name.length - cut - 1 > 100) throw new Error(`The file name ${path} is too long for an archive.`);
    [prefix, rest] = [name.slice(0, cut), name.slice(cut + 1)];
  }
  const header = new Uint8Array(BLOCK);
  tarField(header, 0, 100, rest);
  tarField(header, 100, 8, "0000644\0");
  tarField(header, 108, 8, "0000000\0");
  tarField(header, 116, 8, "0000000\0");
  tarSize(header, size);
  tarField(header, 136, 12, `${Math.floor(mtime / 1000).toString(8).padStart(11, "0")}\0`);
  tarField(header, 148, 8, "        ");
  tarField(header, 156, 1, "0");
  tarField(header, 257, 8, "ustar\u000000");
  tarField(header, 345, 155, prefix);
  const sum = header.reduce((total, byte) => total + byte, 0);
  tarField(header, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return header;
}

function tarOf(files) {
  const parts = [];
  for (const file of files) {
    parts.push(tarHeader(file.webkitRelativePath || file.name, file.size, file.lastModified), file);
    const padding = (BLOCK - (file.size % BLOCK)) % BLOCK;
    if (padding) parts.push(new Uint8Array(padding));
  }
  parts.push(new Uint8Array(2 * BLOCK));
  return new Blob(parts, { type: "application/x-tar" });
}

function csrfToken() {
  const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
  return headers["X-CSRFToken"] || "";
}

async function call(url, options = {}) {
  const response = await fetch(url, {
    credentials: "same-origin",
    ...options,
    headers: { "X-CSRFToken": csrfToken(), ...(options.headers || {}) },
  });
  const body = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, body };
}

function showProgress(form, sent, total) {
  const box = form.querySelector("[data-upload-progress]");
  const percent = total ? Math.floor((sent / total) * 1000) / 10 : 0;
  box.hidden = false;
  box.querySelector("[role=progressbar]").setAttribute("aria-valuenow", String(percent));
  box.querySelector(".progress-fill").style.width = `${percent}%`;
  box.querySelector("[data-upload-text]").textContent = `${percent}% · ${sent} of ${total} bytes`;
}

function showError(form, message) {
  const list = form.querySelector("[data-upload-error]");
  list.hidden = !message;
  list.textContent = "";
  if (message) list.append(Object.assign(document.createElement("li"), { textContent: message }));
}

async function sendChunks(form, upload, file) {
  const chunkBytes = Number(form.dataset.chunkBytes) || CHUNK_BYTES;
  let offset = upload.offset;
  let failures = 0;
  while (offset < file.size) {
    const chunk = file.slice(offset, Math.min(offset + chunkBytes, file.size));
    let result;
    try {
      result = await call(`${upload.url}chunk?offset=${offset}`, {
        method: "POST",
        headers: { "Content-Type": "application/octet-stream" },
        body: chunk,
      });
    } catch (error) {
      result = { ok: false, status: 0, body: { detail: String(error) } };
    }
    if (result.ok) {
      offset = result.body.offset;
      failures = 0;
    } else if (result.status === 409 || result.status === 0) {
      // Out of step or cut off: ask where the server stands and go on from there.
      if (++failures > RETRIES) {
        const why = result.body.detail || `status ${result.status}`;
        throw new Error(`The upload keeps failing (${why}). Choose the same files again later: it resumes where it stopped.`);
      }
      await new Promise((resolve) => setTimeout(resolve, 500 * failures));
      const state = await call(upload.url);
      if (!state.ok) throw new Error(state.body.detail || "The upload was lost; start again.");
      offset = state.body.offset;
    } else {
      throw new Error(result.body.detail || `The server refused a chunk (${result.status}).`);
    }
    showProgress(form, offset, file.size);
  }
}

// An upload outlives the page: the server keeps the bytes, and the browser remembers which
// upload holds the same files, so choosing them again (after a reload, a crash, a sleep)
// resumes where the server stands instead of sending gigabytes again.
function resumeKey(form, chosen) {
  const files = chosen.map((f) => `${f.webkitRelativePath || f.name}:${f.size}:${f.lastModified}`).join("|");
  return `moelab-upload|${form.dataset.startUrl}|${form.elements.kind.value}|${form.elements.name.value}|${files}`;
}

function remembered(key, value) {
  try {
    if (value === undefined) return localStorage.getItem(key);
    if (value === null) localStorage.removeItem(key);
    else localStorage.setItem(key, value);
  } catch {
    return null; // storage disabled: uploads still work, they just cannot resume after a reload
  }
  return null;
}

async function earlierUpload(key, size) {
  const url = remembered(key);
  if (!url) return null;
  const state = await call(url);
  if (state.ok && state.body.size === size) return state.body;
  remembered(key, null);
  return null;
}

async function submitUpload(form) {
  const chosen = [...form.querySelector("input[type=file]").files];
  if (!chosen.length) return showError(form, "Choose a file to upload.");
  showError(form, "");
  const file = chosen.length === 1 ? chosen[0] : tarOf(chosen);
  const key = resumeKey(form, chosen);
  let upload = await earlierUpload(key, file.size);
  if (!upload) {
    const data = new FormData();
    data.set("name", form.elements.name.value);
    data.set("kind", form.elements.kind.value);
    data.set("filename", chosen.length === 1 ? file.name : "files.tar");
    data.set("size", String(file.size));
    const started = await call(form.dataset.startUrl, { method: "POST", body: data });
    if (!started.ok) return showError(form, started.body.detail || "The upload could not start.");
    upload = started.body;
    remembered(key, upload.url);
  }
  form.dataset.uploadUrl = upload.url;
  showProgress(form, upload.offset, file.size);
  await sendChunks(form, upload, file);
  const done = await call(`${upload.url}complete`, { method: "POST" });
  remembered(key, null);
  if (!done.ok) return showError(form, done.body.detail || "The upload could not be completed.");
  window.location.assign(done.body.url);
}

export function enhanceLibraryUpload(root) {
  const scope = root.querySelectorAll ? root : document;
  for (const form of scope.querySelectorAll("form[data-library-upload]")) {
    if (form.dataset.enhanced) continue;
    form.dataset.enhanced = "true";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      submitUpload(form)
        .catch((error) => showError(form, error.message))
        .finally(() => {
          button.disabled = false;
        });
    });
  }
}
