// The banners above the page: a notice after an action, the API's error text on failure.

let hideTimer;

export function showNotice(text) {
  const notice = document.getElementById('notice');
  notice.textContent = text;
  notice.hidden = false;
  clearTimeout(hideTimer);
  hideTimer = setTimeout(() => { notice.hidden = true; }, 8000);
}

export function showError(what, error) {
  const banner = document.getElementById('error');
  const status = error && error.status ? `${error.status}: ` : '';
  banner.textContent = `${what}: ${status}${error && error.message ? error.message : error}`;
  banner.hidden = false;
}

export function clearBanners() {
  document.getElementById('error').hidden = true;
  document.getElementById('notice').hidden = true;
}
