// The library's resumable upload: start → chunks at offsets → complete. After a dropped
// connection the server says how many bytes it holds (GET the upload, or a 409 on a chunk),
// and sending resumes from there, so a multi-GB checkpoint never starts over.
const CHUNK_BYTES = 8 * 1024 * 1024;
const RETRIES = 5;

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
      if (++failures > RETRIES) throw new Error(result.body.detail || "The upload keeps failing; try again later.");
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

async function submitUpload(form) {
  const file = form.querySelector("input[type=file]").files[0];
  if (!file) return showError(form, "Choose a file to upload.");
  showError(form, "");
  const data = new FormData();
  data.set("name", form.elements.name.value);
  data.set("kind", form.elements.kind.value);
  data.set("filename", file.name);
  data.set("size", String(file.size));
  const started = await call(form.dataset.startUrl, { method: "POST", body: data });
  if (!started.ok) return showError(form, started.body.detail || "The upload could not start.");
  const upload = started.body;
  form.dataset.uploadUrl = upload.url;
  showProgress(form, upload.offset, file.size);
  await sendChunks(form, upload, file);
  const done = await call(`${upload.url}complete`, { method: "POST" });
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
