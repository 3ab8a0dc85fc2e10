// The login session: token and role in sessionStorage (gone with the tab), checked
// against clavisd's /me on start; any 401 sends the user back to the login page.
export interface Session {
  token: string;
  user: string;
  role: "admin" | "viewer";
  expires: number;
}

const KEY = "clavis.session";

export function load(): Session | null {
  const text = sessionStorage.getItem(KEY);
  if (!text) return null;
  try {
    const s = JSON.parse(text) as Session;
    return s.expires * 1000 > Date.now() ? s : null;
  } catch {
    return null;
  }
}

export function save(s: Session): void {
  sessionStorage.setItem(KEY, JSON.stringify(s));
}

export function clear(): void {
  sessionStorage.removeItem(KEY);
}
