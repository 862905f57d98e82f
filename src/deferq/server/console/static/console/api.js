// The documented /v1 API, nothing else. The token (when the server wants one) stays in
// this browser's localStorage and goes out as a Bearer token; no cookie is ever used.

const TOKEN_KEY = "deferq-token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const token = {
  get: () => localStorage.getItem(TOKEN_KEY) || "",
  set: (value) => localStorage.setItem(TOKEN_KEY, value.trim()),
  clear: () => localStorage.removeItem(TOKEN_KEY),
};

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function request(path, options) {
  const {method = "GET", body} = options || {};
  const headers = {accept: "application/json"};
  const bearer = token.get();
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let answer;
  try {
    answer = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit", cache: "no-store",
    });
  } catch {
    throw new ApiError(0, "unreachable", "the server does not answer");
  }
  let data = null;
  try {
    data = await answer.json();
  } catch {
    data = null;
  }
  if (!answer.ok) {
    const error = data && data.error ? data.error : {};
    throw new ApiError(answer.status, error.code || "http_error", error.message || answer.statusText);
  }
  return data;
}
