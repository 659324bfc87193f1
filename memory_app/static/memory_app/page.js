// The user's page: threads, the streamed chat and its stop button, approval decisions, the
// memory panel's writes and the switches. Reads arrive as HTML fragments through htmx (the
// server renders and escapes them); every write goes to the JSON API, the same rules as any
// other client. Text shown by this module comes from the page (data attributes, templates),
// so it is translated with the rest.
import htmx from "./vendor/htmx/htmx.esm.js";

const app = document.getElementById("app");
const api = app.dataset.api;
const conversation = document.getElementById("conversation");
const chatStatus = document.getElementById("chat-status");
const composer = document.getElementById("composer");
const messageBox = document.getElementById("composer-text");
const stopButton = document.getElementById("stop");
const sendButton = document.getElementById("send");
const threadList = document.getElementById("thread-list");
const memoryPanel = document.getElementById("memory-panel");
const settingsStatus = document.getElementById("settings-status");
const approvals = document.getElementById("approvals");
const searchForm = document.getElementById("search");
const searchBox = document.getElementById("search-text");
const searchResults = document.getElementById("search-results");
const emptyConversation = [...conversation.childNodes].map((node) => node.cloneNode(true));
const labels = document.getElementById("tpl-labels").content;
const toolWords = document.getElementById("tpl-tools").content;
const loginUrl = new URL(app.dataset.loginUrl, location.href);

let threadId = null;
let threadsUrl = app.dataset.threadsUrl;
let turn = null; // the AbortController of the turn being streamed

// --- the one request path ---------------------------------------------------------------------
// Every request of the page goes through `request` (htmx's through the swap hook below): an
// ended session sends the user to log in again (and back here), a CSRF token gone stale (a
// login in another window rotates it) is taken from the cookie and the request tried once more.

function csrfCookie() {
  const prefix = `${app.dataset.csrfCookie}=`;
  const found = document.cookie.split("; ").find((cookie) => cookie.startsWith(prefix));
  return found ? decodeURIComponent(found.slice(prefix.length)) : null;
}

function setToken(token) {
  app.dataset.csrf = token;
  for (const input of document.querySelectorAll('input[name="csrfmiddlewaretoken"]')) {
    input.value = token;
  }
}

function isLoginPage(url) {
  return Boolean(url) && new URL(url, location.href).pathname === loginUrl.pathname;
}

// To the login page, with a notice there; it brings the user back to this page. The returned
// promise never settles: the page is leaving, its caller has nothing more to do.
function sessionEnded() {
  const back = new URLSearchParams({ next: location.pathname, session: "ended" });
  location.assign(`${loginUrl.pathname}?${back}`);
  return new Promise(() => {});
}

function reloadAnswer() {
  const body = JSON.stringify({ error: app.dataset.reload });
  return new Response(body, { status: 403, headers: { "Content-Type": "application/json" } });
}

async function request(path, init = {}) {
  const attempt = () =>
    fetch(api + path, {
      ...init,
      headers: { ...init.headers, "X-CSRFToken": app.dataset.csrf },
      credentials: "same-origin",
    });
  let response = await attempt();
  if (response.status === 403) {
    const fresh = csrfCookie();
    if (!fresh) return reloadAnswer();
    if (fresh !== app.dataset.csrf) {
      setToken(fresh);
      response = await attempt();
    }
  }
  if (response.status === 401 || (response.redirected && isLoginPage(response.url))) {
    return sessionEnded();
  }
  return response;
}

async function send(method, path, body, extra = {}) {
  const init = { method, headers: { "Content-Type": "application/json", ...extra } };
  if (body !== undefined) init.body = JSON.stringify(body);
  return request(path, init);
}

document.body.addEventListener("htmx:beforeSwap", (event) => {
  const xhr = event.detail.xhr;
  if (xhr.status === 401 || isLoginPage(xhr.responseURL)) {
    event.detail.shouldSwap = false;
    sessionEnded();
  }
});

// The language and logout buttons post a form: its token is refreshed the same way.
for (const form of document.querySelectorAll("form.lang, form.logout")) {
  form.addEventListener("submit", () => {
    const fresh = csrfCookie();
    if (fresh) setToken(fresh);
  });
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return body.error || String(response.status);
  } catch {
    return String(response.status);
  }
}

function problem(message) {
  return `${app.dataset.error} ${message}`;
}

function label(role) {
  return labels.querySelector(`[data-role="${role}"]`).textContent;
}

// A tool call in words ("Saved to memory"), never its name: `state` is "running" or a status.
function toolWord(name, state) {
  const find = (tool) =>
    toolWords.querySelector(`[data-tool="${CSS.escape(tool)}"][data-state="${CSS.escape(state)}"]`);
  const found = find(name) || find("*");
  return found ? found.textContent : state;
}

// --- threads ---------------------------------------------------------------------------------

function refreshThreads() {
  return htmx.ajax("GET", threadsUrl, { target: "#thread-list", swap: "innerHTML" });
}

function markOpenThread() {
  for (const button of threadList.querySelectorAll(".open-thread")) {
    if (button.dataset.threadId === threadId) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
}

function scrollToEnd() {
  conversation.scrollTop = conversation.scrollHeight;
}

async function openThread(id) {
  threadId = id;
  const url = app.dataset.messagesUrl.replace("THREAD", encodeURIComponent(id));
  await htmx.ajax("GET", url, { target: "#conversation", swap: "innerHTML" });
  scrollToEnd();
  markOpenThread();
}

function newThread() {
  threadId = null;
  conversation.replaceChildren(...emptyConversation.map((node) => node.cloneNode(true)));
  chatStatus.textContent = "";
  markOpenThread();
  messageBox.focus();
}

document.getElementById("new-thread").addEventListener("click", newThread);

for (const tab of document.querySelectorAll(".thread-tab")) {
  tab.addEventListener("click", () => {
    for (const other of document.querySelectorAll(".thread-tab")) {
      other.setAttribute("aria-pressed", String(other === tab));
    }
    threadsUrl = tab.dataset.url;
    refreshThreads();
  });
}

threadList.addEventListener("click", async (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.classList.contains("open-thread")) {
    await openThread(button.dataset.threadId);
    conversation.focus();
  } else if (button.classList.contains("thread-status")) {
    const id = button.dataset.threadId;
    const response = await send("PATCH", `threads/${encodeURIComponent(id)}/`, {
      status: button.dataset.status,
    });
    if (!response.ok) {
      chatStatus.textContent = problem(await errorOf(response));
      return;
    }
    if (id === threadId && button.dataset.status !== "active") newThread();
    await refreshThreads();
    document.getElementById("threads-title").focus();
  }
});

threadList.addEventListener("htmx:afterSwap", markOpenThread);

// --- the streamed turn -----------------------------------------------------------------------

function addMessage(role, text) {
  const article = document.getElementById("tpl-message").content.firstElementChild.cloneNode(true);
  article.classList.add(role);
  article.querySelector(".who").textContent = label(role);
  article.querySelector(".text").textContent = text;
  let messages = conversation.querySelector(".messages");
  if (!messages) {
    conversation.replaceChildren();
    messages = document.createElement("div");
    messages.className = "messages";
    conversation.append(messages);
  }
  messages.append(article);
  scrollToEnd();
  return article;
}

function parseEvent(frame) {
  let name = "message";
  let data = "";
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  return { name, data: data ? JSON.parse(data) : {} };
}

function showEvent(event, reply) {
  const { name, data } = event;
  if (name === "run") {
    threadId = data.thread_id;
  } else if (name === "token") {
    reply.querySelector(".text").append(data.text);
    scrollToEnd();
  } else if (name === "tool_call" || name === "tool_result") {
    const tools = reply.querySelector(".tools");
    let item = tools.querySelector(`[data-call="${CSS.escape(data.id)}"]`);
    if (!item) {
      item = document.createElement("li");
      item.className = "tool";
      item.dataset.call = data.id;
      tools.append(item);
    }
    const state = data.status || "running";
    item.className = `tool status-${state}`;
    item.textContent = toolWord(data.name, state);
  } else if (name === "error") {
    chatStatus.textContent = problem(data.error);
  }
}

function setBusy(busy) {
  sendButton.disabled = busy;
  stopButton.hidden = !busy;
  composer.setAttribute("aria-busy", String(busy));
}

// The turn is over (streamed to its end, stopped, or refused before it began): the page
// takes the next message or decision again.
function endTurn() {
  setBusy(false);
  turn = null;
}

// Streams one turn (a message or a decision) from /api/chat/stream/; returns the refusal's
// text when the server refused it before the run started, else null.
async function streamTurn(body) {
  const controller = new AbortController();
  turn = controller;
  setBusy(true);
  chatStatus.textContent = "";
  let response;
  try {
    response = await request("chat/stream/", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
  } catch {
    endTurn();
    chatStatus.textContent = controller.signal.aborted ? app.dataset.stopped : app.dataset.offline;
    return null;
  }
  if (!response.ok) {
    endTurn();
    return errorOf(response);
  }
  const reply = addMessage("assistant", "");
  reply.classList.add("streaming");
  const text = reply.querySelector(".text");
  text.id = "live-reply";
  text.setAttribute("aria-live", "polite");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut = buffer.indexOf("\n\n");
      while (cut >= 0) {
        showEvent(parseEvent(buffer.slice(0, cut)), reply);
        buffer = buffer.slice(cut + 2);
        cut = buffer.indexOf("\n\n");
      }
    }
  } catch {
    if (!controller.signal.aborted) chatStatus.textContent = app.dataset.offline;
  }
  endTurn();
  const stopped = controller.signal.aborted;
  if (threadId) await openThread(threadId);
  if (stopped) chatStatus.textContent = app.dataset.stopped;
  refreshThreads();
  htmx.trigger(approvals, "refresh");
  await htmx.ajax("GET", app.dataset.memoryUrl, { target: "#memory-panel", swap: "innerHTML" });
  return null;
}

// A reply whose turn wrote to memory says "Memory updated" (the server's messages fragment,
// live or reopened later), linking to the line it wrote: that line is found in the memory panel
// by its origin's run, the panel as it is now; false when the panel holds no such line.
function showWrittenLine(link) {
  const run = CSS.escape(link.dataset.lineRun);
  const line = memoryPanel.querySelector(`.line[data-run-id="${run}"]`);
  if (!line) return false;
  line.scrollIntoView({ block: "center" });
  line.focus();
  return true;
}

stopButton.addEventListener("click", () => {
  if (turn) turn.abort();
  messageBox.focus();
});

composer.addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = messageBox.value;
  if (!message.trim() || turn) return;
  messageBox.value = "";
  const sent = addMessage("user", message);
  const refused = await streamTurn({ message, thread_id: threadId });
  if (refused) {
    sent.remove();
    messageBox.value = message;
    chatStatus.textContent = problem(refused);
  }
  messageBox.focus();
});

messageBox.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    composer.requestSubmit();
  }
});

// --- a write waiting for the user's decision -------------------------------------------------

// Rename or delete the open conversation (delete asks first).
async function threadAction(button) {
  const view = button.closest(".thread-view");
  const form = view.querySelector("form.rename");
  const action = button.dataset.threadAction;
  if (action === "rename" || action === "cancel") {
    const editing = action === "rename";
    form.hidden = !editing;
    view.querySelector('[data-thread-action="rename"]').setAttribute("aria-expanded", String(editing));
    if (editing) form.querySelector("input").focus();
    return;
  }
  if (!window.confirm(button.dataset.confirm)) return;
  const id = view.dataset.threadId;
  const response = await send("PATCH", `threads/${encodeURIComponent(id)}/`, { status: "deleted" });
  if (!response.ok) {
    chatStatus.textContent = problem(await errorOf(response));
    return;
  }
  newThread();
  await refreshThreads();
  htmx.trigger(approvals, "refresh");
  document.getElementById("threads-title").focus();
}

conversation.addEventListener("submit", async (event) => {
  const form = event.target.closest("form.rename");
  if (!form) return;
  event.preventDefault();
  const id = form.closest(".thread-view").dataset.threadId;
  const title = form.querySelector("input").value;
  const response = await send("PATCH", `threads/${encodeURIComponent(id)}/`, { title });
  if (!response.ok) {
    form.querySelector(".edit-error").textContent = problem(await errorOf(response));
    return;
  }
  await openThread(id);
  await refreshThreads();
  conversation.querySelector(".thread-title").setAttribute("tabindex", "-1");
  conversation.querySelector(".thread-title").focus();
});

conversation.addEventListener("click", async (event) => {
  const written = event.target.closest("a[data-line-run]");
  if (written && showWrittenLine(written)) {
    event.preventDefault();
    return;
  }
  const button = event.target.closest("button");
  if (button && button.dataset.threadAction) {
    await threadAction(button);
    return;
  }
  const card = button && button.closest(".approval");
  if (!card) return;
  if (button.dataset.approval === "edit") {
    const editing = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", String(editing));
    card.querySelector(".approval-edit").hidden = !editing;
    card.querySelector('[data-decision="edit"]').hidden = !editing;
    card.querySelector('[data-decision="approve"]').hidden = editing;
    if (editing) card.querySelector("textarea").focus();
    return;
  }
  const decision = button.dataset.decision;
  if (!decision || turn) return;
  const resume = { decision };
  if (decision === "edit") {
    resume.content = card.querySelector("textarea").value;
    // The user may correct the line the proposal replaces (a model may name one the file
    // does not hold) or empty it to add the text as a new line.
    const replaces = card.querySelector(".approval-replaces");
    resume.replaces = (replaces && replaces.value) || null;
  }
  const error = card.querySelector(".card-error");
  error.textContent = "";
  const buttons = card.querySelectorAll("button");
  for (const each of buttons) each.disabled = true;
  const refused = await streamTurn({ thread_id: card.dataset.threadId, resume });
  for (const each of buttons) each.disabled = false;
  if (refused) {
    error.textContent = problem(refused);
    button.focus();
  } else {
    messageBox.focus();
  }
});

// --- the memory panel ------------------------------------------------------------------------

function panelBody() {
  return memoryPanel.querySelector(".memory-body");
}

async function refreshMemory(message) {
  await htmx.ajax("GET", app.dataset.memoryUrl, { target: "#memory-panel", swap: "innerHTML" });
  const status = memoryPanel.querySelector(".memory-status");
  if (message && status) status.textContent = message;
  const title = document.getElementById("memory-title");
  title.setAttribute("tabindex", "-1");
  title.focus();
}

function warningsOf(body) {
  const template = panelBody().dataset.warning || "";
  return (body.warnings || []).map((w) =>
    template.replace("{line}", w.line).replace("{kind}", w.kind),
  );
}

async function saveMemory(form) {
  const body = panelBody();
  const error = form.querySelector(".edit-error");
  error.textContent = "";
  const etag = form.dataset.etag || body.dataset.etag;
  const text = form.querySelector("textarea").value;
  const response = await send("PUT", "memory/", { text }, { "If-Match": `"${etag}"` });
  if (response.status === 412) {
    // Someone else wrote first: show the file as it is now; saving again replaces it.
    const current = await request("memory/");
    const now = await current.json();
    form.dataset.etag = now.etag;
    form.querySelector(".current").textContent = now.text ?? "";
    form.querySelector(".conflict").hidden = false;
    form.querySelector(".conflict").setAttribute("role", "alert");
    form.querySelector("textarea").focus();
    return;
  }
  if (!response.ok) {
    error.textContent = problem(await errorOf(response));
    return;
  }
  const warnings = warningsOf(await response.json());
  await refreshMemory([app.dataset.saved, ...warnings].join(" "));
}

// One line edited in place (PATCH, with the etag the panel was drawn with).
async function saveLine(form) {
  const etag = panelBody().dataset.etag;
  const text = form.querySelector("input").value;
  const response = await send("PATCH", `memory/lines/${form.dataset.number}/`, { text }, {
    "If-Match": `"${etag}"`,
  });
  if (response.status === 412) {
    await refreshMemory(app.dataset.lineChanged);
    return;
  }
  if (!response.ok) {
    memoryPanel.querySelector(".memory-status").textContent = problem(await errorOf(response));
    form.querySelector("input").focus();
    return;
  }
  const warnings = warningsOf(await response.json());
  await refreshMemory([app.dataset.saved, ...warnings].join(" "));
}

function editLine(button) {
  const line = button.closest(".line");
  const form = document.getElementById("tpl-line-edit").content.firstElementChild.cloneNode(true);
  const input = form.querySelector("input");
  input.id = `line-edit-${button.dataset.number}`;
  form.querySelector("label").htmlFor = input.id;
  input.value = line.querySelector(".line-text").textContent;
  form.dataset.number = button.dataset.number;
  for (const each of line.querySelectorAll(":scope > button")) each.hidden = true;
  line.append(form);
  input.focus();
}

// After a Forget or a Clear: Undo puts back the file it replaced (kept as a version).
function offerUndo(etag) {
  const undo = document.createElement("button");
  undo.type = "button";
  undo.dataset.memory = "undo";
  undo.dataset.sha = etag.replace(/^sha256:/, "");
  undo.textContent = app.dataset.undo;
  memoryPanel.querySelector(".memory-status").append(" ", undo);
}

memoryPanel.addEventListener("submit", (event) => {
  event.preventDefault();
  if (event.target.classList.contains("line-edit")) saveLine(event.target);
  else saveMemory(event.target);
});

memoryPanel.addEventListener("click", async (event) => {
  const link = event.target.closest("button[data-open-thread]");
  if (link) {
    await openThread(link.dataset.openThread);
    conversation.focus();
    return;
  }
  const button = event.target.closest("button[data-memory]");
  if (!button) return;
  const form = memoryPanel.querySelector(".memory-edit");
  const action = button.dataset.memory;
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  if (action === "edit") {
    form.hidden = false;
    button.setAttribute("aria-expanded", "true");
    form.querySelector("textarea").focus();
  } else if (action === "cancel") {
    await refreshMemory();
  } else if (action === "edit-line") {
    editLine(button);
  } else if (action === "forget") {
    const response = await send("DELETE", "memory/versions/");
    await refreshMemory(response.ok ? app.dataset.saved : problem(await errorOf(response)));
  } else if (action === "clear" || action === "forget-line") {
    const before = panelBody().dataset.etag;
    const hadText = Boolean(memoryPanel.querySelector(".file"));
    const response =
      action === "clear"
        ? await send("DELETE", "memory/")
        : await send("DELETE", `memory/lines/${button.dataset.number}/`, undefined, {
            "If-Match": `"${before}"`,
          });
    if (!response.ok) {
      await refreshMemory(problem(await errorOf(response)));
      return;
    }
    await refreshMemory(action === "clear" ? app.dataset.cleared : app.dataset.forgotten);
    if (hadText) offerUndo(before);
  } else if (action === "restore" || action === "undo") {
    const etag = panelBody().dataset.etag;
    const response = await send(
      "POST",
      `memory/versions/${button.dataset.sha}/restore/`,
      undefined,
      { "If-Match": `"${etag}"` },
    );
    const done = action === "undo" ? app.dataset.undone : app.dataset.saved;
    const message = response.ok
      ? [done, ...warningsOf(await response.json())].join(" ")
      : problem(await errorOf(response));
    await refreshMemory(message);
  }
});

// --- the switches ----------------------------------------------------------------------------

for (const toggle of document.querySelectorAll("input[data-setting]")) {
  toggle.addEventListener("change", async () => {
    settingsStatus.textContent = "";
    const response = await send("PATCH", "settings/", { [toggle.dataset.setting]: toggle.checked });
    if (!response.ok) {
      toggle.checked = !toggle.checked;
      settingsStatus.textContent = problem(await errorOf(response));
      return;
    }
    settingsStatus.textContent = app.dataset.settingsSaved;
    showMemoryState((await response.json()).enable_memory);
    htmx.trigger(memoryPanel, "refresh");
  });
}

// Memory off: the chat says so and the approval switch waits until it is on again.
function showMemoryState(on) {
  document.querySelector('input[data-setting="memory_write_approval"]').disabled = !on;
  document.getElementById("chat-memory-off").hidden = on;
}

// --- search and the approvals of every thread ------------------------------------------------

// The memory lines are filtered on the page as the user types; the conversations are searched
// on submit, through the ranked history search (the page's search fragment).
function filterLines() {
  const query = searchBox.value.trim().toLowerCase();
  const lines = [...memoryPanel.querySelectorAll(".line")];
  let found = 0;
  for (const line of lines) {
    const text = line.querySelector(".line-text").textContent.toLowerCase();
    const shown = !query || text.includes(query);
    line.hidden = !shown;
    if (shown && query) found += 1;
  }
  document.getElementById("search-lines").textContent = query
    ? app.dataset.linesFound.replace("{found}", found).replace("{total}", lines.length)
    : "";
}

searchBox.addEventListener("input", () => {
  filterLines();
  if (!searchBox.value.trim()) {
    searchResults.hidden = true;
    searchResults.replaceChildren();
  }
});

searchForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  filterLines();
  const query = searchBox.value.trim();
  if (!query) return;
  const url = `${app.dataset.searchUrl}?${new URLSearchParams({ q: query })}`;
  await htmx.ajax("GET", url, { target: "#search-results", swap: "innerHTML" });
  searchResults.hidden = false;
  document.getElementById("search-title").focus();
});

memoryPanel.addEventListener("htmx:afterSwap", filterLines);

for (const list of [searchResults, approvals]) {
  list.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-open-thread]");
    if (!button) return;
    await openThread(button.dataset.openThread);
    conversation.focus();
  });
}
