// The console's dialogs: confirming an action (with fields, for a move) and logging in.
// Native <dialog> elements, so they work without a library and Selenium can drive them.

function fieldsOf(form) {
  const values = {};
  for (const input of form.querySelectorAll('#confirm-fields input')) values[input.name] = input.value;
  return values;
}

// Resolves to the fields' values (an object) when confirmed, null when cancelled.
export function confirmAction({ title, text, okLabel = 'OK', fields = [] }) {
  const dialog = document.getElementById('confirm-dialog');
  const form = document.getElementById('confirm-form');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  const holder = document.getElementById('confirm-fields');
  holder.replaceChildren(...fields.map((field) => {
    const label = document.createElement('label');
    const input = document.createElement('input');
    input.name = field.name;
    input.id = `confirm-field-${field.name}`;
    input.placeholder = field.placeholder || '';
    input.required = Boolean(field.required);
    label.append(`${field.label} `, input);
    return label;
  }));
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'ok' ? fieldsOf(form) : null);
    }, { once: true });
    dialog.returnValue = '';
    dialog.showModal();
  });
}

// Resolves to {user, password} once the form is submitted.
export function askLogin(reason) {
  const dialog = document.getElementById('login-dialog');
  document.getElementById('login-reason').textContent = reason || '';
  document.getElementById('login-password').value = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      resolve({
        user: document.getElementById('login-user').value,
        password: document.getElementById('login-password').value,
      });
    }, { once: true });
    if (!dialog.open) dialog.showModal();
  });
}
