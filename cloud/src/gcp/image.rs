//! A MIG's image: the state machine of `set_group_image` (a copy of the current template with the new boot image,
//! then `setInstanceTemplate`, one write per call, each started operation looked at once by the next call), and the
//! cleanup of the templates it made that nothing uses any more (see the module docs of [`super`]).

use super::*;

impl GcpProvider {
    /// One step of `set_group_image` (see the module docs).
    pub(super) async fn set_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        let wanted = normalize_image(image)?;
        let mig_path = MigPath::parse(group)?;
        if let Some(update) = self.image_change_status(group).await? {
            return Ok(update);
        }
        let mig = self.get_mig(&mig_path).await?;
        let (project, current_name) = Self::template_of(&mig_path, &mig)?;
        let current = self.get_template(&project, &current_name).await?;
        if template_image(&current)? == wanted {
            self.delete_one_unused_template(&mig_path, &project, &current_name).await?;
            return Ok(ImageUpdate::Applied);
        }
        let target = names::template_for_image(&current_name, &wanted);
        match self.get_template(&project, &target).await {
            Ok(existing) => {
                if template_image(&existing)? != wanted {
                    return Err(Error::permanent(format!(
                        "instance template {target} exists with another image than {wanted}"
                    )));
                }
                let url = format!("projects/{project}/global/instanceTemplates/{target}");
                let operation = self
                    .migs
                    .set_instance_template()
                    .set_project(&mig_path.project)
                    .set_zone(&mig_path.zone)
                    .set_instance_group_manager(&mig_path.name)
                    .set_body(InstanceGroupManagersSetInstanceTemplateRequest::new().set_instance_template(url))
                    .send()
                    .await
                    .map_err(|e| {
                        errors::from_gax(&format!("instanceGroupManagers.setInstanceTemplate {}", mig_path.name), e)
                    })?;
                if let Some(error) = errors::from_operation(&format!("setting the template of {group}"), &operation) {
                    return Err(error);
                }
                if let Some(name) = operation.name.clone().filter(|_| !is_done(&operation)) {
                    let started = Started::Zone { operation: name, project: mig_path.project, zone: mig_path.zone };
                    self.remember_image_change(group, started);
                }
                Ok(ImageUpdate::InProgress)
            }
            Err(Error::NotFound { .. }) => {
                let copy = template_with_image(&current, &target, &wanted, &mig_path)?;
                let inserted = self.templates.insert().set_project(&project).set_body(copy).send().await;
                let operation = match inserted {
                    Ok(operation) => operation,
                    Err(error) => match errors::from_gax(&format!("instanceTemplates.insert {target}"), error) {
                        // Inserted by an earlier call whose operation is not done yet.
                        Error::Invalid { message } if message.contains("already exists") => {
                            return Ok(ImageUpdate::InProgress);
                        }
                        other => return Err(other),
                    },
                };
                match errors::from_operation(&format!("inserting template {target}"), &operation) {
                    Some(_) if errors::already_exists(&operation) => {}
                    Some(error) => return Err(error),
                    None => {}
                }
                if let Some(name) = operation.name.clone().filter(|_| !is_done(&operation)) {
                    self.remember_image_change(group, Started::Global { operation: name, project });
                }
                Ok(ImageUpdate::InProgress)
            }
            Err(error) => Err(error),
        }
    }

    /// Looks once at the operation of an image change in progress: `Some(InProgress)` while it runs, the error it
    /// ended with, or `None` once it is done (or there was none).
    pub(super) async fn image_change_status(&self, group: &GroupId) -> Result<Option<ImageUpdate>> {
        let started = self.image_changes.lock().unwrap_or_else(|e| e.into_inner()).get(group).cloned();
        let Some(started) = started else { return Ok(None) };
        let operation = match &started {
            Started::Global { operation, project } => self
                .global_operations
                .get()
                .set_project(project)
                .set_operation(operation)
                .send()
                .await
                .map_err(|e| errors::from_gax(&format!("globalOperations.get {operation}"), e)),
            Started::Zone { operation, project, zone } => self
                .zone_operations
                .get()
                .set_project(project)
                .set_zone(zone)
                .set_operation(operation)
                .send()
                .await
                .map_err(|e| errors::from_gax(&format!("zoneOperations.get {operation}"), e)),
        };
        let operation = match operation {
            Ok(operation) => operation,
            // An operation Compute no longer knows: look at the resources themselves.
            Err(Error::NotFound { .. }) => {
                self.forget_image_change(group);
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        if !is_done(&operation) {
            return Ok(Some(ImageUpdate::InProgress));
        }
        self.forget_image_change(group);
        match errors::from_operation(&format!("changing the template of {group}"), &operation) {
            Some(_) if errors::already_exists(&operation) => Ok(None),
            Some(error) => Err(error),
            None => Ok(None),
        }
    }

    pub(super) fn forget_image_change(&self, group: &GroupId) {
        self.image_changes.lock().unwrap_or_else(|e| e.into_inner()).remove(group);
    }

    pub(super) fn remember_image_change(&self, group: &GroupId, started: Started) {
        self.image_changes.lock().unwrap_or_else(|e| e.into_inner()).insert(group.clone(), started);
    }

    /// Deletes at most one template the operator made for this MIG that neither the MIG nor any of its instances
    /// uses.
    pub(super) async fn delete_one_unused_template(&self, mig: &MigPath, project: &str, current: &str) -> Result<()> {
        let base = names::template_base(current);
        let pattern = format!("{base}{}[0-9a-f]{{8}}", names::TEMPLATE_MARK);
        let mut candidates = Vec::new();
        let mut page = None::<String>;
        loop {
            let mut request = self.templates.list().set_project(project).set_filter(format!("name eq {pattern}"));
            if let Some(token) = page.take() {
                request = request.set_page_token(token);
            }
            let answer = request.send().await.map_err(|e| errors::from_gax("instanceTemplates.list", e))?;
            candidates.extend(
                answer
                    .items
                    .into_iter()
                    .filter_map(|t| t.name)
                    .filter(|name| name != current && names::is_marked(name) && names::template_base(name) == base),
            );
            match answer.next_page_token {
                Some(token) if !token.is_empty() => page = Some(token),
                _ => break,
            }
        }
        if candidates.is_empty() {
            return Ok(());
        }
        let used: Vec<String> = self
            .managed_instances(mig)
            .await?
            .into_iter()
            .filter_map(|m| m.version.and_then(|v| v.instance_template))
            .map(|url| last_segment(&url).to_owned())
            .collect();
        let Some(unused) = candidates.into_iter().find(|name| !used.contains(name)) else { return Ok(()) };
        match self.templates.delete().set_project(project).set_instance_template(&unused).send().await {
            Ok(_) => {
                tracing::info!(group = %mig.group_id(), template = unused, "deleted an unused instance template");
                Ok(())
            }
            // Another call deleted it, or an instance still uses it (400 resourceInUseByAnotherResource).
            Err(error) => match errors::from_gax(&format!("instanceTemplates.delete {unused}"), error) {
                Error::NotFound { .. } | Error::Invalid { .. } => Ok(()),
                other => Err(other),
            },
        }
    }
}

/// An operation a call started and a later call looks at.
#[derive(Debug, Clone)]
pub(super) enum Started {
    /// `globalOperations` (templates), with the template it inserts.
    Global { operation: String, project: String },
    /// `zoneOperations` (MIG changes).
    Zone { operation: String, project: String, zone: String },
}

/// The boot disk's source image of a template.
pub(super) fn template_image(template: &InstanceTemplate) -> Result<String> {
    let name = template.name.as_deref().unwrap_or("?");
    let image = template
        .properties
        .as_ref()
        .and_then(|p| p.disks.iter().find(|d| d.boot == Some(true)))
        .and_then(|d| d.initialize_params.as_ref())
        .and_then(|p| p.source_image.as_deref())
        .ok_or_else(|| Error::permanent(format!("instance template {name} has no boot disk with a source image")))?;
    normalize_image(image)
        .map_err(|_| Error::permanent(format!("instance template {name}: the boot image {image:?} is not an image")))
}

/// A copy of `template` named `name` whose boot disk is created from `image`.
pub(super) fn template_with_image(
    template: &InstanceTemplate,
    name: &str,
    image: &str,
    mig: &MigPath,
) -> Result<InstanceTemplate> {
    let mut properties = template.properties.clone().unwrap_or_default();
    let boot = properties
        .disks
        .iter_mut()
        .find(|d| d.boot == Some(true))
        .and_then(|d| d.initialize_params.as_mut())
        .ok_or_else(|| Error::permanent(format!("instance template {:?} has no boot disk", template.name)))?;
    boot.source_image = Some(image.to_owned());
    Ok(InstanceTemplate::new()
        .set_name(name)
        .set_description(format!(
            "Made by update-operator for {} from {}: boot image {image}",
            mig.group_id(),
            template.name.as_deref().unwrap_or("?")
        ))
        .set_properties(properties))
}
